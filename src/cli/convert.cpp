#include "cli/convert.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "common/errors.h"
#include "model/gguf_convert.h"

namespace es::cli {
namespace {

struct ConvertArgs {
  std::string gguf;
  std::string out_dir;
  std::string dtype = "bf16";
  bool quiet = false;
};

void runConvert(const ConvertArgs& a) {
  model::ConvertOptions options;
  if (a.dtype == "bf16") {
    options.dtype = DType::kBF16;
  } else if (a.dtype == "f32") {
    options.dtype = DType::kF32;
  } else {
    ES_THROW(InvalidArgument, "convert: argument '--dtype' = ", a.dtype, " must be f32 or bf16");
  }
  // Progress on stderr, rewritten in place on a terminal, every tenth of the way otherwise.
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  if (!a.quiet) {
    options.progress = [tty, last = size_t{0}](size_t done, size_t total,
                                               const std::string&) mutable {
      const size_t tenth = done * 10 / total;
      if (tty) {
        std::fprintf(stderr, "\rconvert: %zu/%zu tensors", done, total);
        if (done == total) std::fprintf(stderr, "\n");
      } else if (tenth != last || done == total) {
        std::fprintf(stderr, "convert: %zu/%zu tensors\n", done, total);
      }
      last = tenth;
    };
  }
  const auto start = std::chrono::steady_clock::now();
  const model::ConvertReport r = model::convertGgufToHf(a.gguf, a.out_dir, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s\nwrote %s: %zu tensors, model.safetensors %.1f MB (%s)%s, in %.1f s\n",
              r.config.summary().c_str(), a.out_dir.c_str(), r.tensors,
              static_cast<double>(r.safetensors_bytes) / 1e6, a.dtype.c_str(),
              r.unpermuted ? ", q/k rows un-permuted" : "", seconds);
}

}  // namespace

void addConvertCommand(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert",
                                     "Write a Hugging Face model folder (config.json, "
                                     "model.safetensors, tokenizer.json) from a GGUF file");
  cmd->add_option("gguf", args->gguf,
                  "GGUF file (llama, qwen2 or qwen3; F32/F16/BF16/Q8_0/Q4_0/Q4_1 tensors)")
      ->required();  // a missing file is GgufFile::open's error: one line, exit 1, like every other
  cmd->add_option("out_dir", args->out_dir,
                  "Output folder (created if absent; its model files are replaced)")
      ->required();
  cmd->add_option("--dtype", args->dtype, "Weight type written: bf16 or f32 (f32 is exact)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "No progress on stderr");
  cmd->callback([args] { runConvert(*args); });
}

}  // namespace es::cli
