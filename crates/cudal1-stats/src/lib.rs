//! cudal1-stats (skeleton)
