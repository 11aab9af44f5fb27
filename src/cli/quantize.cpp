#include "cli/quantize.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/numeric_flags.h"
#include "cli/progress_output.h"
#include "common/errors.h"
#include "model/quantize_folder.h"

namespace es::cli {
namespace {

struct QuantizeArgs {
  std::string to;
  int32_t group = model::kDefaultInt4Group;
  bool groupGiven = false;
  std::string in_dir;
  std::string out_dir;
  float maxShardMb = static_cast<float>(model::kDefaultMaxShardBytes / 1'000'000);
  bool force = false;
  bool quiet = false;
};

void runQuantize(const QuantizeArgs& a) {
  model::QuantizeOptions options{
      .group = a.group,
      .force = a.force,
      .maxShardBytes = static_cast<uint64_t>(static_cast<double>(a.maxShardMb) * 1e6),
      .progress = {}};
  if (a.to == "int4") {
    options.to = model::QuantizeTo::kInt4;
  } else if (a.to == "fp8") {
    options.to = model::QuantizeTo::kFp8;
    if (a.groupGiven) {
      ES_THROW(InvalidArgument, "quantize: argument '--group' = ", a.group,
               " applies to --to int4 only (fp8 uses [128, 128] blocks)");
    }
  } else {
    ES_THROW(InvalidArgument, "quantize: argument '--to' = ", a.to, " must be int4 or fp8");
  }
  std::unique_ptr<ProgressPrinter> progress;
  if (!a.quiet) {
    progress = stderrProgress();
    options.progress = progress->callback();
  }
  const auto start = std::chrono::steady_clock::now();
  const model::QuantizeReport r = model::quantizeFolder(a.in_dir, a.out_dir, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.reset();
  const std::string format = a.to == "int4"
                                 ? "int4 group " + std::to_string(a.group) + " (awq gemm)"
                                 : "fp8 e4m3 [128, 128]";
  std::printf(
      "%s\nwrote %s: %s, %zu of %zu tensors quantized, %zu tensors in %zu file%s, weights %.1f MB "
      "-> %.1f MB (%.2fx), %zu other file%s copied, in %.1f s\n",
      r.config.summary().c_str(), a.out_dir.c_str(), format.c_str(), r.quantized, r.tensorsIn,
      r.tensorsOut, r.shards, r.shards == 1 ? "" : "s", static_cast<double>(r.bytesIn) / 1e6,
      static_cast<double>(r.bytesOut) / 1e6,
      r.bytesOut > 0 ? static_cast<double>(r.bytesIn) / static_cast<double>(r.bytesOut) : 0.0,
      r.copiedFiles, r.copiedFiles == 1 ? "" : "s", seconds);
}

}  // namespace

void addQuantizeCommand(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a quantized copy of a Hugging Face model folder: int4 (AWQ GEMM packing, "
      "round-to-nearest) or fp8 e4m3 (Qwen3-FP8 [128, 128] blocks)");
  cmd->add_option("--to", args->to, "Format: int4 or fp8")->required();
  CLI::Option* group = addIntegerFlag(cmd, "--group", args->group, 1, 1 << 20,
                                      "int4 group size along K: 32, 64 or 128");
  addRealFlag(cmd, "--max-shard-mb", args->maxShardMb, 0.001, 1e7,
              "Largest safetensors file written, in MB of tensor data (larger models are "
              "sharded, with model.safetensors.index.json)");
  cmd->add_option("in_dir", args->in_dir, "Model folder (config.json + bf16/f16/f32 safetensors)")
      ->required();
  cmd->add_option("out_dir", args->out_dir, "Output folder (created if absent; must be empty)")
      ->required();
  cmd->add_flag("--force", args->force,
                "Write into a non-empty output folder (its model weight files are replaced)");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress on stderr");
  cmd->callback([args, group] {
    args->groupGiven = group->count() > 0;
    runQuantize(*args);
  });
}

}  // namespace es::cli
