//! cudal1-python (skeleton)
