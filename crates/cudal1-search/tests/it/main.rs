//! Integration tests for cudal1-search: templates from a real directory, and
//! one contrastive round from sampled variants to an extracted, hashed program.

mod languages;
mod round;
mod templates;
