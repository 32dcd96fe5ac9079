//! cudal1-task (skeleton)
