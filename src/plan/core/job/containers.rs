//! The containers as SUC's `container.New` builds them (`prepare`, `cordon` or `drain`, then
//! `upgrade`), each with the same environment and mounts, so that the scripts inside see
//! exactly what they see under SUC.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ObjectFieldSelector, SecurityContext,
    VolumeMount, WindowsSecurityContextOptions,
};

use crate::common::naming::secret_volume_name;
use crate::plan::api::{ContainerSpec, SecretSpec, VolumeSpec};
use crate::plan::core::config::JobConfig;
use crate::plan::core::image::with_latest_tag;

use super::drain::drain_args;
use super::volumes::{HOST_ROOT_VOLUME, POD_INFO_PATH, POD_INFO_VOLUME, secret_mount_path};
use super::{RenderError, Target, non_empty_string};

const WINDOWS_SYSTEM_USER: &str = "NT AUTHORITY\\SYSTEM";

impl<'a> Target<'a> {
    fn common(&self, config: &'a JobConfig) -> Common<'a> {
        Common {
            plan_name: self.plan_name,
            latest_version: self.latest_version,
            latest_hash: self.latest_hash,
            secrets: self.plan.spec.secrets.as_deref().unwrap_or_default(),
            image_pull_policy: &config.image_pull_policy,
        }
    }
}

fn host_process() -> SecurityContext {
    SecurityContext {
        windows_options: Some(WindowsSecurityContextOptions {
            host_process: Some(true),
            run_as_user_name: Some(WINDOWS_SYSTEM_USER.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The init containers before the upgrade: `prepare`, then `cordon` or `drain`.
pub(super) fn init_containers(
    t: &Target<'_>,
    config: &JobConfig,
) -> Result<Vec<Container>, RenderError> {
    let spec = &t.plan.spec;
    let common = t.common(config);
    let mut init = Vec::new();
    if let Some(prepare) = &spec.prepare {
        let security = if t.windows {
            Some(host_process())
        } else {
            prepare.security_context.clone()
        };
        let volumes = prepare.volumes.as_deref().unwrap_or_default();
        init.push(common.container(
            "prepare",
            prepare,
            Some(t.latest_version),
            volumes,
            security,
        ));
    }
    let kubectl_args = match (&spec.drain, spec.cordon.unwrap_or(false)) {
        (Some(drain), _) => Some(("drain", drain_args(&t.node.name, drain)?)),
        (None, true) => Some(("cordon", vec!["cordon".to_string(), t.node.name.clone()])),
        (None, false) => None,
    };
    if let Some((name, args)) = kubectl_args {
        let image = if t.windows {
            &config.kubectl_image_windows
        } else {
            &config.kubectl_image
        };
        let kubectl = ContainerSpec {
            image: image.clone(),
            args: Some(args),
            ..Default::default()
        };
        let volumes = spec.upgrade.volumes.as_deref().unwrap_or_default();
        init.push(common.container(name, &kubectl, None, volumes, t.windows.then(host_process)));
    }
    Ok(init)
}

/// The upgrade container, privileged with `CAP_SYS_BOOT` unless the Plan says otherwise.
pub(super) fn upgrade_container(t: &Target<'_>, config: &JobConfig) -> Container {
    let spec = &t.plan.spec;
    let security = match &spec.upgrade.security_context {
        Some(sc) => sc.clone(),
        None if t.windows => host_process(),
        None => SecurityContext {
            privileged: Some(config.privileged),
            capabilities: Some(Capabilities {
                add: Some(vec!["CAP_SYS_BOOT".to_string()]),
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    let volumes = spec.upgrade.volumes.as_deref().unwrap_or_default();
    t.common(config).container(
        "upgrade",
        &spec.upgrade,
        Some(t.latest_version),
        volumes,
        Some(security),
    )
}

/// What every container of one Job shares.
struct Common<'a> {
    plan_name: &'a str,
    latest_version: &'a str,
    latest_hash: &'a str,
    secrets: &'a [SecretSpec],
    image_pull_policy: &'a str,
}

impl Common<'_> {
    /// `container.New` with SUC's options: mounts of the host root, pod info, secrets and then
    /// `volumes`; env of the pod identity, the spec's `envs`, then the plan identity.
    fn container(
        &self,
        name: &str,
        spec: &ContainerSpec,
        latest_tag: Option<&str>,
        volumes: &[VolumeSpec],
        security_context: Option<SecurityContext>,
    ) -> Container {
        let image = match latest_tag {
            Some(version) => with_latest_tag(&spec.image, version),
            None => spec.image.clone(),
        };
        Container {
            name: name.to_string(),
            image: Some(image),
            command: spec.command.clone().filter(|c| !c.is_empty()),
            args: spec.args.clone().filter(|a| !a.is_empty()),
            env: Some(self.env(spec)),
            env_from: spec.env_from.clone().filter(|e| !e.is_empty()),
            volume_mounts: Some(self.mounts(volumes)),
            image_pull_policy: non_empty_string(Some(self.image_pull_policy)),
            security_context,
            ..Default::default()
        }
    }

    /// The pod identity, the spec's `envs`, then the plan identity.
    fn env(&self, spec: &ContainerSpec) -> Vec<EnvVar> {
        let field_env = |name: &str, path: &str| EnvVar {
            name: name.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let value_env = |name: &str, value: &str| EnvVar {
            name: name.to_string(),
            value: non_empty_string(Some(value)),
            ..Default::default()
        };
        let mut env = vec![
            field_env("SYSTEM_UPGRADE_NODE_NAME", "spec.nodeName"),
            field_env("SYSTEM_UPGRADE_POD_NAME", "metadata.name"),
            field_env("SYSTEM_UPGRADE_POD_UID", "metadata.uid"),
        ];
        env.extend(spec.envs.iter().flatten().cloned());
        env.push(value_env("SYSTEM_UPGRADE_PLAN_NAME", self.plan_name));
        env.push(value_env(
            "SYSTEM_UPGRADE_PLAN_LATEST_HASH",
            self.latest_hash,
        ));
        env.push(value_env(
            "SYSTEM_UPGRADE_PLAN_LATEST_VERSION",
            self.latest_version,
        ));
        env
    }

    /// The host root, pod info, the secrets, then `volumes`.
    fn mounts(&self, volumes: &[VolumeSpec]) -> Vec<VolumeMount> {
        let mut mounts = vec![
            VolumeMount {
                name: HOST_ROOT_VOLUME.to_string(),
                mount_path: "/host".to_string(),
                ..Default::default()
            },
            VolumeMount {
                name: POD_INFO_VOLUME.to_string(),
                mount_path: POD_INFO_PATH.to_string(),
                read_only: Some(true),
                ..Default::default()
            },
        ];
        mounts.extend(self.secrets.iter().map(|s| VolumeMount {
            name: secret_volume_name(&s.name),
            mount_path: secret_mount_path(s),
            read_only: Some(true),
            ..Default::default()
        }));
        mounts.extend(volumes.iter().map(|v| VolumeMount {
            name: v.name.clone(),
            mount_path: v.destination.clone(),
            ..Default::default()
        }));
        mounts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::{DrainSpec, labels};
    use crate::plan::core::job::fixtures::*;

    // --- SUC's container_test.go ---

    #[test]
    fn image_pull_policy_comes_from_the_config() {
        let mut p = basic();
        p.spec.prepare = Some(ContainerSpec {
            image: "alpine:3".into(),
            ..Default::default()
        });
        p.spec.cordon = Some(true);
        let config = JobConfig {
            image_pull_policy: "Always".into(),
            ..Default::default()
        };
        let job = render_with(&p, &config);
        for name in ["prepare", "cordon", "upgrade"] {
            assert_eq!(
                container(&job, name).image_pull_policy.as_deref(),
                Some("Always")
            );
        }
    }

    #[test]
    fn latest_tag_is_added_to_name_only_images_of_prepare_and_upgrade() {
        let mut p = plan(
            "upgrade:\n  image: img.example.com:5000/test/image\nprepare:\n  image: rancher/k3s-upgrade\ndrain: {}\n",
        );
        let config = JobConfig {
            kubectl_image: "rancher/kubectl".into(),
            ..Default::default()
        };
        let job = render_with(&p, &config);
        assert_eq!(
            container(&job, "upgrade").image.as_deref(),
            Some(format!("img.example.com:5000/test/image:{VERSION}").as_str())
        );
        assert_eq!(
            container(&job, "prepare").image.as_deref(),
            Some(format!("rancher/k3s-upgrade:{VERSION}").as_str())
        );
        // The kubectl image is used as configured.
        assert_eq!(
            container(&job, "drain").image.as_deref(),
            Some("rancher/kubectl")
        );

        p.spec.upgrade.image = "img.example.com:5000/test/image:v2".into();
        p.spec.prepare = Some(ContainerSpec {
            image: "docker.io/library/alpine".into(),
            ..Default::default()
        });
        let job = render(&p);
        assert_eq!(
            container(&job, "upgrade").image.as_deref(),
            Some("img.example.com:5000/test/image:v2")
        );
        assert_eq!(
            container(&job, "prepare").image.as_deref(),
            Some(format!("alpine:{VERSION}").as_str())
        );
    }

    #[test]
    fn plan_environment_follows_the_pod_identity_and_plan_envs() {
        let p = plan(
            "upgrade:\n  image: u\n  envs:\n  - {name: A, value: '1'}\n  - {name: B, value: '2'}\nprepare:\n  image: p\n  envs:\n  - {name: P, value: x}\ncordon: true\n",
        );
        let job = render(&p);
        let identity = [
            "SYSTEM_UPGRADE_NODE_NAME",
            "SYSTEM_UPGRADE_POD_NAME",
            "SYSTEM_UPGRADE_POD_UID",
        ];
        let plan_env = [
            "SYSTEM_UPGRADE_PLAN_NAME",
            "SYSTEM_UPGRADE_PLAN_LATEST_HASH",
            "SYSTEM_UPGRADE_PLAN_LATEST_VERSION",
        ];
        let expect = |middle: &[&'static str]| -> Vec<&'static str> {
            identity
                .iter()
                .chain(middle)
                .chain(plan_env.iter())
                .copied()
                .collect()
        };
        assert_eq!(env_names(container(&job, "upgrade")), expect(&["A", "B"]));
        assert_eq!(env_names(container(&job, "prepare")), expect(&["P"]));
        assert_eq!(env_names(container(&job, "cordon")), expect(&[]));

        let env = container(&job, "upgrade").env.as_ref().expect("env");
        let field = |i: usize| {
            env[i]
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| (f.field_path.as_str(), f.api_version.as_deref()))
        };
        assert_eq!(field(0), Some(("spec.nodeName", None)));
        assert_eq!(field(1), Some(("metadata.name", None)));
        assert_eq!(field(2), Some(("metadata.uid", None)));
        assert_eq!(env[3].value.as_deref(), Some("1"));
        assert_eq!(env[5].value.as_deref(), Some("k3s-server"));
        assert_eq!(env[6].value.as_deref(), Some(HASH));
        assert_eq!(env[7].value.as_deref(), Some(VERSION));
    }

    #[test]
    fn secrets_are_mounted_read_only_in_every_container() {
        let long = "s".repeat(80);
        let p = plan(&format!(
            "upgrade:\n  image: u\nprepare:\n  image: p\ndrain: {{}}\nsecrets:\n- {{name: tls, path: /etc/tls, defaultMode: 256}}\n- {{name: {long}, path: rel/dir/, ignoreUpdates: true}}\n- {{name: token, path: ''}}\n"
        ));
        let job = render(&p);
        let long_volume = secret_volume_name(&long);
        assert_eq!(long_volume.len(), 63);
        assert!(long_volume.contains(&long[..50]));
        for name in ["prepare", "drain", "upgrade"] {
            let m = mounts(container(&job, name));
            assert_eq!(
                &m[2..5],
                &[
                    ("secret-tls", "/etc/tls", Some(true)),
                    (
                        long_volume.as_str(),
                        "/run/system-upgrade/secrets/rel/dir",
                        Some(true)
                    ),
                    (
                        "secret-token",
                        "/run/system-upgrade/secrets/token",
                        Some(true)
                    ),
                ],
                "{name}"
            );
        }
        let volumes = pod(&job).volumes.as_ref().expect("volumes");
        let secret = |i: usize| volumes[i].secret.as_ref().expect("secret volume");
        assert_eq!(volumes[2].name, "secret-tls");
        assert_eq!(secret(2).secret_name.as_deref(), Some("tls"));
        assert_eq!(secret(2).default_mode, Some(256));
        assert_eq!(secret(2).optional, Some(false));
        assert_eq!(volumes[3].name, long_volume);
        assert_eq!(secret(3).secret_name.as_deref(), Some(long.as_str()));
        assert_eq!(secret(3).default_mode, None);
        assert_eq!(secret(3).optional, Some(true));
        assert_eq!(volumes[4].name, "secret-token");
    }

    #[test]
    fn security_contexts_are_passed_through() {
        let p = plan(
            "upgrade:\n  image: u\n  securityContext: {runAsUser: 0, privileged: false}\nprepare:\n  image: p\n  securityContext: {privileged: true}\n",
        );
        let job = render(&p);
        assert_eq!(
            container(&job, "upgrade").security_context,
            p.spec.upgrade.security_context
        );
        assert_eq!(
            container(&job, "prepare").security_context,
            p.spec
                .prepare
                .as_ref()
                .and_then(|c| c.security_context.clone())
        );
    }

    #[test]
    fn default_security_contexts() {
        let mut p = basic();
        p.spec.prepare = Some(ContainerSpec {
            image: "p".into(),
            ..Default::default()
        });
        p.spec.cordon = Some(true);
        let job = render(&p);
        let privileged = SecurityContext {
            privileged: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["CAP_SYS_BOOT".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            container(&job, "upgrade").security_context,
            Some(privileged)
        );
        // SUC quirk 11: prepare is not privileged unless it asks.
        assert_eq!(container(&job, "prepare").security_context, None);
        assert_eq!(container(&job, "cordon").security_context, None);

        let config = JobConfig {
            privileged: false,
            ..Default::default()
        };
        let job = render_with(&p, &config);
        let sc = container(&job, "upgrade")
            .security_context
            .clone()
            .expect("sc");
        assert_eq!(sc.privileged, Some(false));
    }

    // --- drain and cordon ---

    #[test]
    fn cordon_drain_and_neither() {
        let mut p = basic();
        let job = render(&p);
        assert!(pod(&job).init_containers.is_none());

        p.spec.cordon = Some(true);
        let job = render(&p);
        assert_eq!(init_names(&job), vec!["cordon"]);
        let cordon = container(&job, "cordon");
        assert_eq!(args(cordon), vec!["cordon", "node-1"]);
        assert_eq!(cordon.command, None);
        assert_eq!(cordon.image.as_deref(), Some("rancher/kubectl:v1.30.3"));

        // Drain cordons anyway, so cordon is ignored.
        p.spec.drain = Some(DrainSpec::default());
        let job = render(&p);
        assert_eq!(init_names(&job), vec!["drain"]);
        let drain = container(&job, "drain");
        assert_eq!(&args(drain)[..2], &["drain", "node-1"]);
        assert_eq!(drain.command, None);

        p.spec.cordon = Some(false);
        p.spec.prepare = Some(ContainerSpec {
            image: "p".into(),
            ..Default::default()
        });
        assert_eq!(init_names(&render(&p)), vec!["prepare", "drain"]);
        p.spec.drain = None;
        assert_eq!(init_names(&render(&p)), vec!["prepare"]);
    }

    #[test]
    fn kubectl_targets_the_node_name() {
        let mut p = basic();
        p.spec.cordon = Some(true);
        let mut n = node("node-1.example.com");
        n.labels.insert(labels::HOSTNAME.into(), "NODE-1".into());
        let job = render_on(&p, &n, &JobConfig::default()).expect("renders");
        assert_eq!(
            args(container(&job, "cordon")),
            vec!["cordon", "node-1.example.com"]
        );
    }

    // --- volumes and mounts ---

    #[test]
    fn cordon_mounts_upgrade_volumes() {
        let p = plan(
            "upgrade:\n  image: u\n  volumes:\n  - {name: etc, source: /etc, destination: /host-etc}\ncordon: true\n",
        );
        let job = render(&p);
        assert_eq!(
            mounts(container(&job, "cordon")).last(),
            Some(&("etc", "/host-etc", None))
        );
    }

    // --- Windows ---

    #[test]
    fn windows_nodes_get_host_process_containers() {
        let mut p = plan(
            "upgrade:\n  image: u\nprepare:\n  image: p\n  securityContext: {privileged: true}\ndrain: {}\n",
        );
        let config = JobConfig {
            kubectl_image_windows: "example.com/kubectl-windows:v1".into(),
            ..Default::default()
        };
        let host_process = Some(SecurityContext {
            windows_options: Some(WindowsSecurityContextOptions {
                host_process: Some(true),
                run_as_user_name: Some("NT AUTHORITY\\SYSTEM".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let job = render_on(&p, &windows_node(), &config).expect("renders");
        assert_eq!(
            container(&job, "drain").image.as_deref(),
            Some("example.com/kubectl-windows:v1")
        );
        assert_eq!(container(&job, "drain").security_context, host_process);
        // Prepare's own context is replaced on Windows, as in SUC.
        assert_eq!(container(&job, "prepare").security_context, host_process);
        assert_eq!(container(&job, "upgrade").security_context, host_process);

        // Upgrade keeps a context the plan sets.
        let own = SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        };
        p.spec.upgrade.security_context = Some(own.clone());
        p.spec.drain = None;
        p.spec.cordon = Some(true);
        let job = render_on(&p, &windows_node(), &config).expect("renders");
        assert_eq!(container(&job, "upgrade").security_context, Some(own));
        assert_eq!(container(&job, "cordon").security_context, host_process);
        assert_eq!(
            container(&job, "cordon").image.as_deref(),
            Some("example.com/kubectl-windows:v1")
        );
    }
}
