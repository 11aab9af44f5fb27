// libFuzzer target for the chat-template renderer (built by tools/fuzz.sh chat_template, not by
// CMake). The input is the template text, then after a NUL byte a conversation: a flags byte
// (bit 0 addGenerationPrompt, bit 1 enableThinking), then messages, each a role byte (mod 4:
// system, user, assistant, or an unknown role) and its content up to the next NUL. Rejections
// are InvalidArgument (no supported family, an empty conversation, an unknown role); any other
// exception, a sanitizer report or a broken invariant (a user message missing from the
// rendered prompt) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.h"
#include "tokenizer/chat_template.h"

using namespace es::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view templateText = input.substr(0, split);
  std::string_view rest = split == std::string_view::npos ? "" : input.substr(split + 1);
  bool generation = true, thinking = true;
  if (!rest.empty()) {
    generation = rest[0] & 1;
    thinking = rest[0] & 2;
    rest.remove_prefix(1);
  }
  std::vector<ChatMessage> messages;
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  while (!rest.empty() && messages.size() < 64) {
    const std::string role = kRoles[static_cast<uint8_t>(rest[0]) % 4];
    rest.remove_prefix(1);
    const size_t end = rest.find('\0');
    messages.push_back({role, std::string(rest.substr(0, end))});
    rest = end == std::string_view::npos ? "" : rest.substr(end + 1);
  }
  ChatTemplate chat;
  try {
    chat = ChatTemplate::fromTemplateText(templateText);
  } catch (const es::InvalidArgument&) {
    return 0;
  }
  std::string out;
  try {
    out = chat.render(messages, generation, thinking);
  } catch (const es::InvalidArgument&) {
    return 0;
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "user" && out.find(m.content) == std::string::npos) __builtin_trap();
  }
  return 0;
}
