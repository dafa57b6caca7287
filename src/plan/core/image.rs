//! Image references and SUC's version rules.
//!
//! SUC parses an image with the Docker reference grammar (`ParseNormalizedNamed`); if it names a
//! repository without a tag or digest, it appends `:<latestVersion>` and prints the familiar form
//! (no `docker.io/`, no `library/`). Anything that does not parse is left exactly as written.

/// The version as SUC stores it in `status.latestVersion`: every `+` replaced by `-`, because `+`
/// is not allowed in image tags or label values (`v1.30.1+k3s1` becomes `v1.30.1-k3s1`).
pub fn munge_version(version: &str) -> String {
    version.replace('+', "-")
}

/// The image a container runs: name-only references get `:<latest_version>`.
pub fn with_latest_tag(image: &str, latest_version: &str) -> String {
    match parse(image) {
        Some(r) if r.tag.is_none() && r.digest.is_none() && is_valid_tag(latest_version) => {
            format!("{}:{}", r.familiar_name(), latest_version)
        }
        _ => image.to_string(),
    }
}

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const MAX_NAME_TOTAL_LENGTH: usize = 255;

/// A normalized reference: `domain/path[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    pub domain: String,
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl ImageReference {
    /// The name as people write it: `alpine`, `rancher/k3s-upgrade`, `registry:5000/x/y`.
    pub fn familiar_name(&self) -> String {
        if self.domain == DEFAULT_DOMAIN {
            match self.path.strip_prefix(OFFICIAL_REPO_PREFIX) {
                Some(rest) if !rest.contains('/') => rest.to_string(),
                _ => self.path.clone(),
            }
        } else {
            format!("{}/{}", self.domain, self.path)
        }
    }
}

/// `reference.ParseNormalizedNamed`, or `None` where Go returns an error.
pub fn parse(input: &str) -> Option<ImageReference> {
    // A 64-hex string is an image ID, not a name.
    if input.len() == 64
        && input
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    let (remote, digest) = match input.split_once('@') {
        Some((r, d)) => {
            if !is_valid_digest(d) {
                return None;
            }
            (r, Some(d.to_string()))
        }
        None => (input, None),
    };
    let (name, tag) = match remote.rfind(':') {
        Some(i) if !remote[i + 1..].contains('/') => (&remote[..i], Some(&remote[i + 1..])),
        _ => (remote, None),
    };
    if let Some(t) = tag
        && !is_valid_tag(t)
    {
        return None;
    }
    let (domain, path) = split_domain(name);
    if domain != DEFAULT_DOMAIN && !is_valid_domain(&domain) {
        return None;
    }
    if !path.split('/').all(is_valid_path_component) {
        return None;
    }
    if domain.len() + 1 + path.len() > MAX_NAME_TOTAL_LENGTH {
        return None;
    }
    Some(ImageReference {
        domain,
        path,
        tag: tag.map(str::to_string),
        digest,
    })
}

/// `splitDockerDomain`: the first component is a registry when it has a `.` or `:`, is
/// `localhost`, or has upper-case letters; otherwise the registry is Docker Hub.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN.to_string();
    }
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        path = format!("{OFFICIAL_REPO_PREFIX}{path}");
    }
    (domain, path)
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn is_valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && is_alnum_lower(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == b.len() {
            return true;
        }
        match b[i] {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if i < b.len() && b[i] == b'_' {
                    i += 1;
                }
            }
            b'-' => {
                while i < b.len() && b[i] == b'-' {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

/// A host name (labels of letters, digits and inner dashes) or a bracketed IPv6 address,
/// optionally with `:port`.
fn is_valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, after)) => {
                if ip.is_empty() || !ip.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
                    return false;
                }
                match after {
                    "" => return true,
                    p => match p.strip_prefix(':') {
                        Some(port) => {
                            return !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
                        }
                        None => return false,
                    },
                }
            }
            None => return false,
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

/// `[\w][\w.-]{0,127}`
pub fn is_valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    let word = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
    !b.is_empty()
        && b.len() <= 128
        && word(&b[0])
        && b[1..].iter().all(|c| word(c) || *c == b'.' || *c == b'-')
}

/// `algorithm:hex`, with the algorithm `[a-z0-9]+([+._-][a-z0-9]+)*` and at least 32 hex digits.
fn is_valid_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let alg_ok = alg
        .split(['+', '.', '_', '-'])
        .all(|part| !part.is_empty() && part.bytes().all(is_alnum_lower));
    alg_ok && hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "v1.30.1-k3s1";
    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn version_munging_replaces_every_plus() {
        assert_eq!(munge_version("v1.30.1+k3s1"), "v1.30.1-k3s1");
        assert_eq!(munge_version("a+b+c"), "a-b-c");
        assert_eq!(munge_version("v1"), "v1");
    }

    #[test]
    fn name_only_images_get_the_version_tag() {
        assert_eq!(
            with_latest_tag("rancher/k3s-upgrade", V),
            format!("rancher/k3s-upgrade:{V}")
        );
        assert_eq!(with_latest_tag("alpine", V), format!("alpine:{V}"));
        assert_eq!(
            with_latest_tag("docker.io/library/alpine", V),
            format!("alpine:{V}")
        );
        assert_eq!(
            with_latest_tag("index.docker.io/rancher/x", V),
            format!("rancher/x:{V}")
        );
        assert_eq!(
            with_latest_tag("docker.io/library/a/b", V),
            format!("library/a/b:{V}")
        );
    }

    #[test]
    fn registry_hosts_with_ports_are_not_tags() {
        assert_eq!(
            with_latest_tag("img.example.com:5000/test/image", V),
            format!("img.example.com:5000/test/image:{V}")
        );
        assert_eq!(
            with_latest_tag("localhost/img", V),
            format!("localhost/img:{V}")
        );
        assert_eq!(
            with_latest_tag("localhost:5000/img", V),
            format!("localhost:5000/img:{V}")
        );
        assert_eq!(
            with_latest_tag("[::1]:5000/img", V),
            format!("[::1]:5000/img:{V}")
        );
        assert_eq!(
            with_latest_tag("Registry.Example/img", V),
            format!("Registry.Example/img:{V}")
        );
    }

    #[test]
    fn tagged_and_digested_images_are_left_alone() {
        for image in [
            "alpine:3.20".to_string(),
            "img.example.com:5000/test/image:v2".to_string(),
            format!("alpine@{DIGEST}"),
            format!("docker.io/library/alpine:3@{DIGEST}"),
            format!("registry:5000/a/b@{DIGEST}"),
        ] {
            assert_eq!(with_latest_tag(&image, V), image);
        }
    }

    #[test]
    fn unparseable_images_are_left_alone() {
        for image in [
            "upper/CASE",
            "bad//path",
            "trailing-/x",
            "a:b:c",
            "alpine@sha256:short",
            "",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(with_latest_tag(image, V), image, "{image}");
        }
    }

    #[test]
    fn an_invalid_tag_value_leaves_the_image_alone() {
        assert_eq!(with_latest_tag("alpine", "-bad"), "alpine");
        assert_eq!(with_latest_tag("alpine", ""), "alpine");
    }

    #[test]
    fn path_components_follow_the_grammar() {
        for ok in ["a", "a.b", "a_b", "a__b", "a---b", "k3s-upgrade"] {
            assert!(is_valid_path_component(ok), "{ok}");
        }
        for bad in ["", "A", "a___b", "-a", "a-", "a..b", "a/b"] {
            assert!(!is_valid_path_component(bad), "{bad}");
        }
    }

    #[test]
    fn parse_splits_domain_path_tag_and_digest() {
        let r = parse(&format!("quay.io/org/img:1.0@{DIGEST}")).expect("parses");
        assert_eq!(r.domain, "quay.io");
        assert_eq!(r.path, "org/img");
        assert_eq!(r.tag.as_deref(), Some("1.0"));
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
    }
}
