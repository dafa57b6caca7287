//! The published names, chosen once in Cargo.toml (`repository`, and `[package.metadata.slipway]`'s
//! `image` and `chart`), are the ones every install runs and every page names: a name changed in
//! one place and not in another would install an image nobody publishes.

use std::path::PathBuf;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

/// Cargo.toml's `key = "value"` line (each key used here appears once).
fn cargo(key: &str) -> String {
    let prefix = format!("{key} = \"");
    let manifest = read("Cargo.toml");
    let found: Vec<&str> = (manifest.lines())
        .filter_map(|l| l.strip_prefix(prefix.as_str())?.strip_suffix('"'))
        .collect();
    assert_eq!(found.len(), 1, "Cargo.toml has one {key}: {found:?}");
    found[0].to_string()
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn the_project_home_is_one_address() {
    let home = cargo("repository");
    assert_eq!(home, env!("CARGO_PKG_REPOSITORY"));
    assert_eq!(cargo("homepage"), home);
    let chart = yaml("charts/slipway/Chart.yaml");
    assert_eq!(chart["home"], home.as_str(), "Chart.yaml home");
    assert_eq!(chart["sources"][0], home.as_str(), "Chart.yaml sources");
    let krew = yaml("plugins/krew/slipway.yaml");
    assert_eq!(
        krew["spec"]["homepage"],
        home.as_str(),
        "the krew manifest's homepage"
    );
    assert!(
        read("docs/installation.md").contains(&home),
        "docs/installation.md names it"
    );
}

#[test]
fn every_install_runs_the_published_image_at_this_version() {
    let image = cargo("image");
    // A base's `images` do not reach the resources of a component, so the agent's has its own.
    for file in [
        "deploy/kustomization.yaml",
        "deploy/components/reboot-agent/kustomization.yaml",
    ] {
        let k = yaml(file);
        let images = k["images"].as_array().expect("images");
        assert_eq!(images.len(), 1, "{file}");
        // The manifests name the image itself; an overlay's `images` entry names it too.
        assert_eq!(images[0]["name"], image.as_str(), "{file}'s image");
        assert!(
            images[0].get("newName").is_none(),
            "{file} renames no image"
        );
        assert_eq!(
            images[0]["newTag"], VERSION,
            "{file}'s tag is Cargo.toml's version"
        );
    }
    let values = yaml("charts/slipway/values.yaml");
    assert_eq!(
        values["image"]["repository"],
        image.as_str(),
        "the chart's image"
    );
    let published = format!("{image}:{VERSION}");
    assert!(
        read("dist/slipway.yaml").contains(&format!("image: {published}\n")),
        "dist/slipway.yaml runs {published}: run `just release-manifest`"
    );
    for page in ["docs/installation.md", "charts/slipway/README.md"] {
        assert!(read(page).contains(&image), "{page} names {image}");
    }
    // The image's archive carries the name (scripts/image.sh reads it from Cargo.toml), so that
    // an archive imported on a node (`ctr images import`, k3s's agent/images) is what the
    // manifests run.
    assert!(read("scripts/image.sh").contains(r#"--name "$slipway_image""#));
    assert!(read("scripts/names.sh").contains("slipway_image=$(slipway_cargo image)"));
}

#[test]
fn the_chart_is_published_beside_the_image() {
    let chart = cargo("chart");
    let image = cargo("image");
    let (registry, path) = image.split_once('/').expect("REGISTRY/PATH");
    let owner = path.rsplit_once('/').map_or("", |(owner, _)| owner);
    assert_eq!(
        chart,
        format!("oci://{registry}/{owner}/charts/slipway"),
        "the chart is an OCI artefact in the image's registry, under the same owner"
    );
}
