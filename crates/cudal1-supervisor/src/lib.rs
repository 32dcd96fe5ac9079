//! cudal1-supervisor (skeleton)
