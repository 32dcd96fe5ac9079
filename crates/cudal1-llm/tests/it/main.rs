//! Integration tests for cudal1-llm: real local HTTP servers and, for the
//! embedded model, a real Python worker.

mod embedded;
mod mixture;
mod openai;
mod server;
