//! Who a process belongs to, read from its cgroup path: the container id and
//! runtime (containerd, CRI-O, Docker, Podman) under the systemd or cgroupfs
//! cgroup drivers, the Kubernetes pod UID, and the systemd unit.
//!
//! Path shapes (cgroup v2 paths, or the v1 `name=systemd` hierarchy):
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/
//!   kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`,
//!   `.../crio-<id>.scope`, `.../docker-<id>.scope`; guaranteed pods sit
//!   directly under `kubepods.slice` as `kubepods-pod<uid>.slice`.
//! - cgroupfs driver: `/kubepods/besteffort/pod<uid>/<id>`, `/kubepods/pod<uid>/<id>`.
//! - outside Kubernetes: `/system.slice/docker-<id>.scope`, `/docker/<id>`,
//!   `/machine.slice/libpod-<id>.scope/container`, `/system.slice/redis-server.service`.

/// What a cgroup path says about its processes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupIdentity {
    /// `containerd`, `cri-o`, `docker`, `podman`; `None` when the path names a
    /// container but not its runtime (cgroupfs driver).
    pub runtime: Option<&'static str>,
    /// Full container id (64 hex digits for all four runtimes).
    pub container_id: Option<String>,
    /// Kubernetes pod UID with dashes, as in `metadata.uid`.
    pub pod_uid: Option<String>,
    /// systemd unit: the deepest `*.service`, else the deepest `*.scope`
    /// that is not a container's, e.g. `session-3.scope`.
    pub unit: Option<String>,
}

/// Scope prefixes of container runtimes under the systemd cgroup driver.
const SCOPE_PREFIXES: [(&str, &str); 4] = [
    ("cri-containerd-", "containerd"),
    ("crio-", "cri-o"),
    ("docker-", "docker"),
    ("libpod-", "podman"),
];

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `cri-containerd-<id>.scope` -> (containerd, id).
fn container_scope(component: &str) -> Option<(&'static str, &str)> {
    let stem = component.strip_suffix(".scope")?;
    SCOPE_PREFIXES.iter().find_map(|(prefix, runtime)| {
        let id = stem.strip_prefix(prefix)?;
        is_container_id(id).then_some((*runtime, id))
    })
}

/// `kubepods-burstable-pod1234_5678.slice` or `pod1234-5678` -> `1234-5678`.
fn pod_uid(component: &str) -> Option<String> {
    if let Some(stem) = component.strip_suffix(".slice") {
        let at = stem.find("-pod")?;
        return Some(stem[at + 4..].replace('_', "-"));
    }
    let uid = component.strip_prefix("pod")?;
    (uid.len() >= 32
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_'))
    .then(|| uid.replace('_', "-"))
}

/// Parse a cgroup path (as the `cgroup` label shows it).
pub fn parse(path: &str) -> CgroupIdentity {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut id = CgroupIdentity::default();
    let in_kubepods = components
        .first()
        .is_some_and(|c| c.starts_with("kubepods"));
    let mut service = None;
    let mut scope = None;
    for (i, component) in components.iter().enumerate() {
        if in_kubepods && id.pod_uid.is_none() {
            id.pod_uid = pod_uid(component);
        }
        if let Some((runtime, container)) = container_scope(component) {
            id.runtime = Some(runtime);
            id.container_id = Some(container.to_string());
            continue;
        }
        if is_container_id(component) {
            // cgroupfs driver: a bare id under pod<uid> or /docker
            let parent = i.checked_sub(1).map(|p| components[p]);
            id.runtime = match parent {
                Some("docker") => Some("docker"),
                _ => None,
            };
            id.container_id = Some(component.to_string());
            continue;
        }
        if component.ends_with(".service") {
            service = Some(*component);
        } else if component.ends_with(".scope") && !component.starts_with("crio-conmon-") {
            scope = Some(*component);
        }
    }
    if id.container_id.is_none() {
        id.unit = service.or(scope).map(str::to_string);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "0b1a9c2e-7d44-4c2c-9f5b-1f2d3e4a5b6c";

    fn uid_underscored() -> String {
        UID.replace('-', "_")
    }

    /// The systemd driver's names, as kubelet and containerd make them (the
    /// cgroupfs driver's are read from a real node by
    /// tests/e2e/test_real_node.py). kubelet 1.36's `CgroupName.ToSystemd`
    /// (pkg/kubelet/cm/cgroup_manager_linux.go) turns the pod's cgroup
    /// {"kubepods", QOS, "pod" + UID} into nested slices, each named after
    /// its parents, with the uid's '-' escaped to '_'
    /// (`escapeSystemdCgroupName`); guaranteed pods have no QOS level.
    /// containerd 2.4's CRI (internal/cri/server/podsandbox/helpers_linux.go,
    /// `getCgroupsPath`) gives runc "<pod slice>:cri-containerd:<id>", which
    /// runc's systemd driver makes the unit `cri-containerd-<id>.scope`.
    #[test]
    fn containerd_systemd_driver() {
        let uid = uid_underscored();
        for pod_slice in [
            format!("kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"),
            format!("kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice"),
            format!("kubepods-pod{uid}.slice"),
        ] {
            let path = format!("/kubepods.slice/{pod_slice}/cri-containerd-{ID}.scope");
            let id = parse(&path);
            assert_eq!(id.runtime, Some("containerd"), "{path}");
            assert_eq!(id.container_id.as_deref(), Some(ID), "{path}");
            assert_eq!(id.pod_uid.as_deref(), Some(UID), "{path}");
            assert_eq!(id.unit, None, "{path}");
        }
    }

    #[test]
    fn guaranteed_pod_crio_and_docker_scopes() {
        let crio = parse(&format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope",
            uid_underscored()
        ));
        assert_eq!(
            (crio.runtime, crio.pod_uid.as_deref()),
            (Some("cri-o"), Some(UID))
        );
        let docker = parse(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/docker-{ID}.scope",
            uid_underscored()
        ));
        assert_eq!(docker.runtime, Some("docker"));
        // CRI-O's monitor process is not the container
        let conmon = parse(&format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-conmon-{ID}.scope",
            uid_underscored()
        ));
        assert_eq!(conmon.container_id, None);
        assert_eq!(conmon.pod_uid.as_deref(), Some(UID));
    }

    #[test]
    fn cgroupfs_driver() {
        let id = parse(&format!("/kubepods/besteffort/pod{UID}/{ID}"));
        assert_eq!(id.runtime, None);
        assert_eq!(id.container_id.as_deref(), Some(ID));
        assert_eq!(id.pod_uid.as_deref(), Some(UID));
        let guaranteed = parse(&format!("/kubepods/pod{UID}/{ID}"));
        assert_eq!(guaranteed.pod_uid.as_deref(), Some(UID));
        let docker = parse(&format!("/docker/{ID}"));
        assert_eq!(
            (docker.runtime, docker.container_id.as_deref()),
            (Some("docker"), Some(ID))
        );
    }

    #[test]
    fn outside_kubernetes() {
        let docker = parse(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((docker.runtime, docker.pod_uid), (Some("docker"), None));
        let podman = parse(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(podman.runtime, Some("podman"));
        assert_eq!(podman.container_id.as_deref(), Some(ID));
    }

    #[test]
    fn systemd_units() {
        assert_eq!(
            parse("/system.slice/redis-server.service").unit.as_deref(),
            Some("redis-server.service")
        );
        assert_eq!(
            parse("/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-1.scope")
                .unit
                .as_deref(),
            Some("user@1000.service")
        );
        assert_eq!(
            parse("/user.slice/user-1000.slice/session-3.scope")
                .unit
                .as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(parse("/").unit, None);
        assert_eq!(parse("unknown"), CgroupIdentity::default());
    }
}
