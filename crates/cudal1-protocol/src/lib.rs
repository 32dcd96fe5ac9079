//! cudal1-protocol (skeleton)
