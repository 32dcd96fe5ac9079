//! Content hashes identify programs in the store and in the compile cache.

use sha2::{Digest, Sha256};

/// sha256 of the text, as lowercase hex.
pub fn content_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
