#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "tokenizer/chat_template.h"

namespace es::tokenizer {
namespace {

// The models' own template texts (SmolLM2-135M-Instruct's GGUF, Qwen3's tokenizer_config.json).
std::string templateText(const std::string& name) {
  std::ifstream f(test::test_data_dir() + "/chat_templates/" + name + ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ChatTemplate, SmolLM2InjectsItsDefaultSystemMessage) {
  const ChatTemplate t = ChatTemplate::fromTemplateText(templateText("smollm2"));
  EXPECT_EQ(t.family(), ChatFamily::kChatML);
  EXPECT_EQ(t.defaultSystem(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<ChatMessage> user = {{"user", "What is 2+2?"}};
  EXPECT_EQ(t.render(user),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> withSystem = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(t.render(withSystem, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen2StyleDefaultAfterAToolsBranch) {
  // The default system literal comes after a branch that opens a system turn with other text.
  const ChatTemplate t = ChatTemplate::fromTemplateText(
      "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- else %}{%- if messages[0]['role'] == "
      "'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
      "{%- endif %}{%- endif %}");
  EXPECT_EQ(t.defaultSystem(), "You are a helpful assistant.");
}

TEST(ChatTemplate, Qwen3ThinkingSwitchAndHistory) {
  const ChatTemplate t = ChatTemplate::fromTemplateText(templateText("qwen3"));
  EXPECT_EQ(t.family(), ChatFamily::kQwen3);
  const std::vector<ChatMessage> user = {{"user", "Hello"}};
  EXPECT_EQ(t.render(user), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(user, true, false),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::vector<ChatMessage> turns = {{"system", "S"},
                                          {"user", "Q1"},
                                          {"assistant", "<think>\nplan\n</think>\n\nA1"},
                                          {"user", "Q2"}};
  EXPECT_EQ(t.render(turns),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3Families) {
  const ChatTemplate plain = ChatTemplate::fromTemplateText(
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}");
  EXPECT_EQ(plain.family(), ChatFamily::kLlama3);
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  EXPECT_EQ(plain.render(user),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const ChatTemplate dated = ChatTemplate::fromTemplateText(
      "{{- \"Cutting Knowledge Date: December 2023\\n\" }} <|start_header_id|>");
  EXPECT_EQ(dated.render(user, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, UnknownTemplatesAndBadMessagesAreErrors) {
  test::expectInvalidArgument(
      [] { ChatTemplate::fromTemplateText("{{ bos_token }}[INST] {{ message }} [/INST]"); },
      "template");
  const ChatTemplate t = ChatTemplate::fromTemplateText(templateText("smollm2"));
  test::expectInvalidArgument([&] { t.render({}); }, "messages.size()");
  const std::vector<ChatMessage> bad = {{"robot", "x"}};
  test::expectInvalidArgument([&] { t.render(bad); }, "messages[0].role");
}

}  // namespace
}  // namespace es::tokenizer
