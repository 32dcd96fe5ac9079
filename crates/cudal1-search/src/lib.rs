//! cudal1-search (in progress)
