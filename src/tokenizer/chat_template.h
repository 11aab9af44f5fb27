#pragma once
// Chat prompts rendered the way the model's own Jinja chat template would render them, for the
// template families in use by the supported models. There is no Jinja engine here: the family is
// recognised from the template text, and a template that matches no family is a clear error
// naming what was found (never a silently wrong prompt).
//
//   ChatML (SmolLM2, Qwen2/2.5): <|im_start|>{role}\n{content}<|im_end|>\n per message; a default
//     system message taken from the template text when the conversation has none.
//   Qwen3: ChatML without a default system message; earlier assistant turns keep only the text
//     after </think>; enable_thinking = false appends an empty think block to the generation
//     prompt.
//   Llama-3: <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>;
//     3.1+ templates (they mention "Cutting Knowledge Date") get their dated system preamble.
#include <span>
#include <string>
#include <string_view>

namespace es::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFamily { kChatML, kQwen3, kLlama3 };

class ChatTemplate {
 public:
  // Recognises the family of a model's template text; throws InvalidArgument if none matches.
  static ChatTemplate fromTemplateText(std::string_view jinja);

  ChatFamily family() const { return family_; }
  const std::string& defaultSystem() const { return defaultSystem_; }

  // The prompt text; addGenerationPrompt opens the assistant turn. enableThinking only matters
  // for Qwen3. Throws InvalidArgument for an empty conversation or an unknown role.
  std::string render(std::span<const ChatMessage> messages, bool addGenerationPrompt = true,
                     bool enableThinking = true) const;

 private:
  ChatFamily family_ = ChatFamily::kChatML;
  std::string defaultSystem_;  // ChatML only; empty when the template injects none
  bool llamaDatedPreamble_ = false;
};

}  // namespace es::tokenizer
