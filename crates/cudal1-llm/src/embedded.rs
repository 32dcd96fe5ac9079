//! placeholder
pub struct EmbeddedConfig;
pub struct EmbeddedModel;
