//! cudal1-store (skeleton)
