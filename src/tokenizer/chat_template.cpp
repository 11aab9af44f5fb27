#include "tokenizer/chat_template.h"

#include "common/errors.h"

namespace es::tokenizer {
namespace {

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// The literal text of a default system message in a ChatML template, written as
// '<|im_start|>system\n...<|im_end|>' inside a string literal, where the newline is either an
// escape sequence or a real newline (both occur in shipped templates).
std::string defaultChatMLSystem(std::string_view jinja) {
  for (std::string_view open :
       {std::string_view("'<|im_start|>system\\n"), std::string_view("'<|im_start|>system\n")}) {
    for (size_t begin = jinja.find(open); begin != std::string_view::npos;
         begin = jinja.find(open, begin + 1)) {
      const size_t textBegin = begin + open.size();
      const size_t end = jinja.find("<|im_end|>", textBegin);
      // A literal that closes before <|im_end|> (e.g. '<|im_start|>system\n' + messages[0]...)
      // is the branch for a given system message, not a default: keep looking.
      const size_t quote = jinja.find('\'', textBegin);
      if (end != std::string_view::npos && quote > end) {
        return std::string(jinja.substr(textBegin, end - textBegin));
      }
    }
  }
  return "";
}

void checkRole(const ChatMessage& m, size_t index) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant") {
    throw_invalid_argument("ChatTemplate::render", "messages[" + std::to_string(index) + "].role",
                           m.role, "must be system, user or assistant");
  }
}

// Qwen3 keeps only the answer of earlier assistant turns (the text after </think>).
std::string withoutThinking(const std::string& content) {
  const size_t close = content.rfind("</think>");
  if (close == std::string::npos) return content;
  size_t start = close + 8;
  while (start < content.size() && content[start] == '\n') ++start;
  return content.substr(start);
}

}  // namespace

ChatTemplate ChatTemplate::fromTemplateText(std::string_view jinja) {
  ChatTemplate t;
  if (contains(jinja, "<|start_header_id|>")) {
    t.family_ = ChatFamily::kLlama3;
    t.llamaDatedPreamble_ = contains(jinja, "Cutting Knowledge Date");
  } else if (contains(jinja, "<|im_start|>") && contains(jinja, "<think>")) {
    t.family_ = ChatFamily::kQwen3;
  } else if (contains(jinja, "<|im_start|>")) {
    t.family_ = ChatFamily::kChatML;
    t.defaultSystem_ = defaultChatMLSystem(jinja);
  } else {
    ES_THROW(InvalidArgument, "chat template: argument 'template' = \"", jinja.substr(0, 60),
             jinja.size() > 60 ? "..." : "",
             "\" is not a supported family (ChatML, Qwen3 or Llama-3)");
  }
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool addGenerationPrompt,
                                 bool enableThinking) const {
  ES_CHECK_ARG(!messages.empty(), "ChatTemplate::render", "messages.size()", 0, "must be > 0");
  for (size_t i = 0; i < messages.size(); ++i) checkRole(messages[i], i);
  std::string out;
  if (family_ == ChatFamily::kLlama3) {
    out = "<|begin_of_text|>";
    size_t first = 0;
    if (llamaDatedPreamble_) {
      // The 3.1 template always opens with a system turn carrying its knowledge/today dates.
      std::string system = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
      if (messages[0].role == "system") {
        system += messages[0].content;
        first = 1;
      }
      out += "<|start_header_id|>system<|end_header_id|>\n\n" + system + "<|eot_id|>";
    }
    for (size_t i = first; i < messages.size(); ++i) {
      out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
             messages[i].content + "<|eot_id|>";
    }
    if (addGenerationPrompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (family_ == ChatFamily::kChatML && messages[0].role != "system" && !defaultSystem_.empty()) {
    out += "<|im_start|>system\n" + defaultSystem_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    const std::string content = family_ == ChatFamily::kQwen3 && m.role == "assistant"
                                    ? withoutThinking(m.content)
                                    : m.content;
    out += "<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n";
  }
  if (addGenerationPrompt) {
    out += "<|im_start|>assistant\n";
    if (family_ == ChatFamily::kQwen3 && !enableThinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace es::tokenizer
