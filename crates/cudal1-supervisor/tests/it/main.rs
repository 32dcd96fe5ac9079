//! Integration tests of cudal1-supervisor against real Python worker processes.

mod common;
mod lifecycle;
mod misbehaving;
mod sandbox;
