//! cudal1-eval (skeleton)
