"""Rules on the CUDA runtime and the libraries: cuDNN, TF32, determinism, debug switches left on, copies between host
and device."""
