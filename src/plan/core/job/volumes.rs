//! The pod's volumes (SUC's, plus a host path for each volume only `prepare` names) and where
//! the Plan's secrets are mounted.

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, DownwardAPIVolumeSource, HostPathVolumeSource, ObjectFieldSelector,
    SecretVolumeSource, Volume,
};

use crate::common::naming::secret_volume_name;
use crate::plan::api::{Plan, SecretSpec};

pub(super) const HOST_ROOT_VOLUME: &str = "host-root";
pub(super) const POD_INFO_VOLUME: &str = "pod-info";
pub(super) const POD_INFO_PATH: &str = "/run/system-upgrade/pod";
const SECRETS_DIR: &str = "/run/system-upgrade/secrets";

/// host-root, pod-info, the secrets, `upgrade.volumes`, then the volumes only `prepare` names.
pub(super) fn pod_volumes(plan: &Plan) -> Vec<Volume> {
    let host_path = |name: &str, path: &str, type_: Option<&str>| Volume {
        name: name.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_string(),
            type_: type_.map(str::to_string),
        }),
        ..Default::default()
    };
    let field_file = |path: &str, field: &str| DownwardAPIVolumeFile {
        path: path.to_string(),
        field_ref: Some(ObjectFieldSelector {
            api_version: Some("v1".to_string()),
            field_path: field.to_string(),
        }),
        ..Default::default()
    };
    let mut volumes = vec![
        host_path(HOST_ROOT_VOLUME, "/", Some("Directory")),
        Volume {
            name: POD_INFO_VOLUME.to_string(),
            downward_api: Some(DownwardAPIVolumeSource {
                default_mode: Some(420),
                items: Some(vec![
                    field_file("labels", "metadata.labels"),
                    field_file("annotations", "metadata.annotations"),
                ]),
            }),
            ..Default::default()
        },
    ];
    volumes.extend(plan.spec.secrets.iter().flatten().map(|s| Volume {
        name: secret_volume_name(&s.name),
        secret: Some(SecretVolumeSource {
            secret_name: Some(s.name.clone()),
            default_mode: s.default_mode,
            optional: Some(s.ignore_updates.unwrap_or(false)),
            ..Default::default()
        }),
        ..Default::default()
    }));
    volumes.extend(
        plan.spec
            .upgrade
            .volumes
            .iter()
            .flatten()
            .map(|v| host_path(&v.name, &v.source, None)),
    );
    // SUC mounts prepare.volumes but never creates them, so a name not also in
    // upgrade.volumes made the pod invalid; give such names their own host path.
    let prepare_volumes = plan
        .spec
        .prepare
        .iter()
        .flat_map(|p| p.volumes.iter().flatten());
    for v in prepare_volumes {
        if !volumes.iter().any(|existing| existing.name == v.name) {
            volumes.push(host_path(&v.name, &v.source, None));
        }
    }
    volumes
}

/// Where a Plan secret is mounted: an absolute `path` as is, a relative one under
/// `/run/system-upgrade/secrets/`, an empty one at `/run/system-upgrade/secrets/<name>`
/// (the last two cleaned as Go's `filepath.Join` does).
pub fn secret_mount_path(secret: &SecretSpec) -> String {
    if secret.path.is_empty() {
        clean_path(&format!("{SECRETS_DIR}/{}", secret.name))
    } else if secret.path.starts_with('/') {
        secret.path.clone()
    } else {
        clean_path(&format!("{SECRETS_DIR}/{}", secret.path))
    }
}

/// Go's `path.Clean` for the rooted paths secrets are mounted at.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::job::fixtures::*;

    // --- SUC's container_test.go ---

    #[test]
    fn secret_paths_are_joined_and_cleaned_like_go() {
        let path = |name: &str, path: &str| {
            secret_mount_path(&SecretSpec {
                name: name.into(),
                path: path.into(),
                ..Default::default()
            })
        };
        assert_eq!(path("s", "/abs//path/"), "/abs//path/");
        assert_eq!(path("s", "a"), "/run/system-upgrade/secrets/a");
        assert_eq!(path("s", "./a/./b/"), "/run/system-upgrade/secrets/a/b");
        assert_eq!(path("s", "a/../b"), "/run/system-upgrade/secrets/b");
        assert_eq!(path("s", "../../../../x"), "/x");
        assert_eq!(path("s", ""), "/run/system-upgrade/secrets/s");
    }

    // --- volumes and mounts ---

    #[test]
    fn volumes_and_mounts_in_suc_order() {
        let p = plan(
            "upgrade:\n  image: u\n  volumes:\n  - {name: etc, source: /etc, destination: /host-etc}\n  - {name: shared, source: /var/shared, destination: /shared}\nprepare:\n  image: p\n  volumes:\n  - {name: shared, source: /ignored, destination: /prep-shared}\n  - {name: prep-only, source: /opt/prep, destination: /prep}\ndrain: {}\nsecrets:\n- {name: s, path: s}\n",
        );
        let job = render(&p);
        assert_eq!(
            volume_names(&job),
            vec![
                "host-root",
                "pod-info",
                "secret-s",
                "etc",
                "shared",
                "prep-only"
            ]
        );
        let volumes = pod(&job).volumes.as_ref().expect("volumes");
        assert_eq!(
            volumes[0].host_path,
            Some(HostPathVolumeSource {
                path: "/".into(),
                type_: Some("Directory".into())
            })
        );
        let downward = volumes[1].downward_api.as_ref().expect("downward api");
        assert_eq!(downward.default_mode, Some(420));
        let items: Vec<_> = downward
            .items
            .iter()
            .flatten()
            .map(|i| {
                let f = i.field_ref.as_ref().expect("field ref");
                (
                    i.path.as_str(),
                    f.field_path.as_str(),
                    f.api_version.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            items,
            vec![
                ("labels", "metadata.labels", Some("v1")),
                ("annotations", "metadata.annotations", Some("v1"))
            ]
        );
        let host = |i: usize| volumes[i].host_path.clone().expect("host path");
        assert_eq!(
            host(3),
            HostPathVolumeSource {
                path: "/etc".into(),
                type_: None
            }
        );
        // A name in both keeps upgrade's source, as in SUC.
        assert_eq!(host(4).path, "/var/shared");
        assert_eq!(
            host(5),
            HostPathVolumeSource {
                path: "/opt/prep".into(),
                type_: None
            }
        );

        let common = [
            ("host-root", "/host", None),
            ("pod-info", "/run/system-upgrade/pod", Some(true)),
            ("secret-s", "/run/system-upgrade/secrets/s", Some(true)),
        ];
        let upgrade_mounts = [("etc", "/host-etc", None), ("shared", "/shared", None)];
        let expected_upgrade: Vec<_> = common.iter().chain(&upgrade_mounts).copied().collect();
        assert_eq!(mounts(container(&job, "upgrade")), expected_upgrade);
        assert_eq!(mounts(container(&job, "drain")), expected_upgrade);
        let prepare_mounts = [
            ("shared", "/prep-shared", None),
            ("prep-only", "/prep", None),
        ];
        let expected_prepare: Vec<_> = common.iter().chain(&prepare_mounts).copied().collect();
        assert_eq!(mounts(container(&job, "prepare")), expected_prepare);

        // Every mount has a pod volume.
        let names = volume_names(&job);
        for c in init(&job).iter().chain(pod(&job).containers.iter()) {
            for m in c.volume_mounts.iter().flatten() {
                assert!(names.contains(&m.name.as_str()), "{} in {}", m.name, c.name);
            }
        }
    }
}
