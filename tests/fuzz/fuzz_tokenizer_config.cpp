// libFuzzer target for the tokenizer_config.json reader and the chat template it carries (built
// by tools/fuzz.sh tokenizer_config, not by CMake). The input is a whole tokenizer_config.json,
// applied to a small fixed tokenizer. A FormatError is the expected way to reject the file and
// an InvalidArgument the expected way to reject its chat template (no supported family); any
// other exception, a sanitizer report or a broken invariant is a finding. An accepted template
// renders a fixed conversation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_json.h"

using namespace es::tokenizer;

namespace {

// A byte-level vocabulary of the 256 byte tokens plus the ChatML specials.
TokenizerSpec baseSpec() {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.push_back(bytesToByteLevel(std::string(1, char(b))));
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    const auto id = static_cast<int32_t>(spec.vocab.size());
    spec.vocab.push_back(bytesToByteLevel(special));
    spec.addedTokens.push_back({id, special, true});
  }
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TokenizerSpec kBase = baseSpec();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TokenizerSpec spec = kBase;
  try {
    applyTokenizerConfig(spec, text, "fuzz-input");
  } catch (const es::FormatError&) {
    return 0;
  }
  const auto inVocab = [&](const std::optional<int32_t>& id) {
    return !id || (*id >= 0 && static_cast<size_t>(*id) < spec.vocab.size());
  };
  if (!inVocab(spec.bosId) || !inVocab(spec.eosId) || !inVocab(spec.padId)) __builtin_trap();
  if (spec.addBos && !spec.bosId) __builtin_trap();
  const std::string chatTemplate = spec.chatTemplate;
  try {
    const BpeTokenizer tokenizer(std::move(spec));
    (void)tokenizer.encodePrompt("hi <|im_start|>", true);
  } catch (const es::FormatError&) {
  }
  if (chatTemplate.empty()) return 0;
  ChatTemplate chat;
  try {
    chat = ChatTemplate::fromTemplateText(chatTemplate);
  } catch (const es::InvalidArgument&) {
    return 0;
  }
  const std::vector<ChatMessage> messages = {{"system", "Be brief."},
                                             {"user", "Hello"},
                                             {"assistant", "<think>x</think>\nHi"},
                                             {"user", "Again"}};
  for (bool generation : {false, true}) {
    for (bool thinking : {false, true}) {
      const std::string out = chat.render(messages, generation, thinking);
      if (out.find("Again") == std::string::npos) __builtin_trap();
    }
  }
  return 0;
}
