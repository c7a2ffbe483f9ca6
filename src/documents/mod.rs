//! GraphQL documents before they run: which texts this server accepts and what it keeps of
//! them. `persisted`: automatic persisted queries (Apollo's protocol) and the parsed documents
//! kept by hash; `trusted`: the trusted documents' manifest, when only its documents may run.
//! Both name a document by `sha256_hex` of its text.
//!
//! Below `graphql`, whose request hooks consult them, and `state`, which holds them.

pub(crate) mod persisted;
pub(crate) mod trusted;

use sha2::{Digest, Sha256};

/// The lowercase hex SHA-256 of a query's text, as Apollo clients compute it.
pub fn sha256_hex(text: &str) -> String {
    lowercase_hex(&Sha256::digest(text.as_bytes()))
}

/// Bytes as lowercase hex digits (a document's hash here; search cursors' digests too). Every
/// request hashes its text, so the digits are written into one allocation.
pub(crate) fn lowercase_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::sha256_hex;

    #[test]
    fn the_hash_is_the_lowercase_hex_sha256_of_the_text() {
        // As Python's hashlib.sha256(b"{ __typename }").hexdigest() gives it.
        assert_eq!(sha256_hex("{ __typename }"), "7f56e67dd21ab3f30d1ff8b7bed08893f0a0db86449836189b361dd1e56ddb4b");
    }
}
