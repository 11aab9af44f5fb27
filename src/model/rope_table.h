#pragma once
// The RoPE cos/sin table of a model: [maxPositions, rotaryDim] f32, cos of the frequency i in
// column i and its sin in column rotaryDim/2 + i (the layout the rotary kernels read, spec §2.1).
//
// Frequencies follow transformers' rope initialisers (default, linear, llama3, yarn), computed
// with the same float32 operations in the same order, so the table matches the framework's
// cos/sin to about one ulp; yarn's attention factor multiplies both cos and sin, as there.
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace es::model {

// inv_freq[i] for i < rotaryDim/2.
std::vector<float> ropeInverseFrequencies(const RopeConfig& rope, int64_t rotaryDim,
                                          int64_t maxPositionEmbeddings);
// The factor applied to cos and sin (1 except for yarn).
float ropeAttentionFactor(const RopeConfig& rope);

// [maxPositions, rotaryDim] f32, row-major. maxPositions > 0, rotaryDim even and > 0.
std::vector<float> buildRopeTable(const RopeConfig& rope, int64_t rotaryDim,
                                  int64_t maxPositionEmbeddings, int64_t maxPositions);

}  // namespace es::model
