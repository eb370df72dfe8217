// Convolutions: CPU's kernels, not the composite that sends other backends to *_overrideable.
#pragma once



namespace openmtia {

extern const char* const kConvolutionOps[3];  // the ops convolution.cpp registers

}  // namespace openmtia
