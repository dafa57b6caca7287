//! Names of the objects slipway creates, identical to SUC's.

use sha2::{Digest, Sha256};

/// Kubernetes' limit on label values and most object names.
pub const MAX_NAME_LENGTH: usize = 63;

/// wrangler's `SafeConcatName`: join with `-`; past 63 bytes keep 57 (or 56) bytes and add a
/// sha256 suffix so the result stays unique and ends in an alphanumeric character.
pub fn safe_concat_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    if full.len() <= MAX_NAME_LENGTH {
        return full;
    }
    let digest = hex(&Sha256::digest(full.as_bytes()));
    let bytes = full.as_bytes();
    let (keep, suffix) = if bytes[56].is_ascii_lowercase() || bytes[56].is_ascii_digit() {
        (57, &digest[..5])
    } else {
        (56, &digest[..6])
    };
    // Object names are ASCII; a multi-byte name is cut on bytes exactly as Go does.
    format!("{}-{}", String::from_utf8_lossy(&bytes[..keep]), suffix)
}

/// The Job name SUC gives the upgrade of `node` by `plan` at `hash`:
/// `apply-<plan>-on-<node name up to the first dot>-with-<hash>`, made safe.
pub fn job_name(plan: &str, node_name: &str, hash: &str) -> String {
    let short_node = node_name.split('.').next().unwrap_or(node_name);
    safe_concat_name(&["apply", plan, "on", short_node, "with", hash])
}

/// The pod volume name of a Plan secret.
pub fn secret_volume_name(secret: &str) -> String {
    safe_concat_name(&["secret", secret])
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e";

    #[test]
    fn short_names_are_joined_unchanged() {
        assert_eq!(safe_concat_name(&["secret", "k3s"]), "secret-k3s");
        let exactly_63 = "a".repeat(63);
        assert_eq!(safe_concat_name(&[&exactly_63]), exactly_63);
    }

    #[test]
    fn job_name_matches_suc_reference_example() {
        assert_eq!(
            job_name("k3s-server", "node-1", HASH),
            "apply-k3s-server-on-node-1-with-a71d41ca3e2c6b5a1d92efcb9-61926"
        );
    }

    #[test]
    fn node_name_is_cut_at_first_dot() {
        let with_domain = job_name("p", "node-1.example.com", "abc");
        assert_eq!(with_domain, "apply-p-on-node-1-with-abc");
    }

    #[test]
    fn long_names_get_a_hash_suffix_of_total_length_63() {
        let name = job_name("k3s-server", "node-1", HASH);
        assert_eq!(name.len(), 63);
        let long = safe_concat_name(&[&"x".repeat(100)]);
        assert_eq!(long.len(), 63);
        assert_eq!(&long[..57], &"x".repeat(57));
    }

    #[test]
    fn a_non_alphanumeric_cut_point_keeps_56_bytes_and_six_hex_digits() {
        // Byte 56 is '-', which must not end a name.
        let parts = format!("{}-{}", "a".repeat(56), "b".repeat(20));
        let name = safe_concat_name(&[&parts]);
        assert_eq!(&name[..56], &"a".repeat(56));
        assert_eq!(name.as_bytes()[56], b'-');
        assert_eq!(name.len(), 63);
        let digest = hex(&Sha256::digest(parts.as_bytes()));
        assert_eq!(&name[57..], &digest[..6]);
    }

    #[test]
    fn multibyte_input_does_not_panic() {
        let name = safe_concat_name(&[&"é".repeat(40)]);
        assert!(name.len() <= 66);
    }

    #[test]
    fn secret_volume_names_end_with_short_secret_names() {
        assert_eq!(secret_volume_name("tls"), "secret-tls");
        let long = "s".repeat(80);
        let v = secret_volume_name(&long);
        assert_eq!(v.len(), 63);
        assert!(v.starts_with("secret-sss"));
    }
}
