//! The Kubernetes manifests in `deploy/kubernetes/` agree with the node they run: the
//! ConfigMap's settings and the Deployment's environment load (every key exists, every value
//! is valid), and the ports, probe paths, names, mounts and timeouts they name are the ones
//! those settings and the headless Service say. Nothing here runs a Kubernetes cluster; it
//! keeps the files from drifting away from the code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shardik_runtime::config::Settings;
use yaml_rust2::{Yaml, YamlLoader};

fn manifest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

/// The one document of `file`.
fn load(file: &str) -> Yaml {
    let path = manifest_dir().join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut docs =
        YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file} is not YAML: {e}"));
    assert_eq!(docs.len(), 1, "{file}: one document");
    docs.remove(0)
}

fn text<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, found {y:?}"))
}

fn int(y: &Yaml, what: &str) -> i64 {
    y.as_i64()
        .unwrap_or_else(|| panic!("{what}: expected an integer, found {y:?}"))
}

fn list<'a>(y: &'a Yaml, what: &str) -> &'a [Yaml] {
    y.as_vec()
        .unwrap_or_else(|| panic!("{what}: expected a list, found {y:?}"))
}

/// Kubernetes' `$(VAR)` expansion in args and env values, from `vars`.
fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = s.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("$({k})"), v);
    }
    assert!(!out.contains("$("), "unexpanded variable in `{s}`");
    out
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    args.get(i + 1)
        .unwrap_or_else(|| panic!("{flag} without a value"))
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in `{addr}`"))
}

#[test]
fn the_manifests_match_the_settings_they_run_with() {
    let deployment = load("deployment.yaml");
    let configmap = load("configmap.yaml");
    let service = load("headless-service.yaml");
    let pdb = load("pod-disruption-budget.yaml");
    assert_eq!(text(&deployment["kind"], "kind"), "Deployment");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let app = text(&labels["app.kubernetes.io/name"], "pod label");

    // Rolling updates: one new pod before each old one goes.
    let strategy = &deployment["spec"]["strategy"];
    assert_eq!(text(&strategy["type"], "strategy"), "RollingUpdate");
    assert_eq!(int(&strategy["rollingUpdate"]["maxSurge"], "maxSurge"), 1);
    assert_eq!(
        int(
            &strategy["rollingUpdate"]["maxUnavailable"],
            "maxUnavailable"
        ),
        0
    );
    let replicas = int(&deployment["spec"]["replicas"], "replicas");

    // The pod, its container, its environment as the kubelet expands it.
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = list(&pod["containers"], "containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let mut vars = BTreeMap::new();
    vars.insert("POD_NAME".to_string(), "shardik-7d9f-abcde".to_string());
    vars.insert("POD_NAMESPACE".to_string(), "shop".to_string());
    let mut env = Vec::new();
    for e in list(&container["env"], "env") {
        let name = text(&e["name"], "env name");
        match e["value"].as_str() {
            Some(v) => env.push((name.to_string(), expand(v, &vars))),
            None => {
                let field = text(&e["valueFrom"]["fieldRef"]["fieldPath"], name);
                assert!(
                    ["metadata.name", "metadata.namespace"].contains(&field),
                    "{name} from {field}"
                );
                assert!(
                    vars.contains_key(name),
                    "{name} is one of the expanded variables"
                );
            }
        }
    }
    let args: Vec<String> = list(&container["args"], "args")
        .iter()
        .map(|a| expand(text(a, "arg"), &vars))
        .collect();
    assert_eq!(args[0], "node");

    // The settings: the ConfigMap's file, mounted where --config says, then the environment.
    let config_path = flag(&args, "--config");
    let mounts = list(&container["volumeMounts"], "volumeMounts");
    let mount = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no mount of volume {name}"))
    };
    let config_mount = mount("config");
    let sub = text(&config_mount["subPath"], "config subPath");
    assert_eq!(
        config_path,
        text(&config_mount["mountPath"], "config mountPath")
    );
    assert_eq!(
        text(&configmap["metadata"]["name"], "configmap name"),
        text(
            &pod_volume(pod, "config")["configMap"]["name"],
            "config volume"
        )
    );
    let toml = text(&configmap["data"][sub], "the ConfigMap's file");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(sub);
    std::fs::write(&file, toml).unwrap();
    let settings = Settings::load_with_env(Some(&file), &env)
        .unwrap_or_else(|e| panic!("the manifests' settings do not load: {e}"));

    // Ports: the cluster port bound and advertised, the management port of the settings.
    let ports: BTreeMap<&str, i64> = list(&container["ports"], "ports")
        .iter()
        .map(|p| {
            (
                text(&p["name"], "port name"),
                int(&p["containerPort"], "containerPort"),
            )
        })
        .collect();
    let bind = flag(&args, "--bind");
    let advertise = flag(&args, "--advertise");
    assert_eq!(i64::from(port_of(bind)), ports["cluster"]);
    assert_eq!(i64::from(port_of(advertise)), ports["cluster"]);
    assert_eq!(
        i64::from(settings.management.http.port),
        ports["management"]
    );
    assert_eq!(settings.management.http.hostname, "0.0.0.0");

    // The advertised name resolves through the headless Service: POD.SUBDOMAIN.NS.svc...
    let service_name = text(&service["metadata"]["name"], "service name");
    assert_eq!(text(&pod["subdomain"], "subdomain"), service_name);
    assert_eq!(
        advertise,
        format!("shardik-7d9f-abcde.{service_name}.shop.svc.cluster.local:2552")
    );
    assert_eq!(text(&service["spec"]["clusterIP"], "clusterIP"), "None");
    assert_eq!(
        service["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true),
        "pods must be found before they are ready: they are ready only once joined"
    );
    assert_eq!(
        text(
            &service["spec"]["selector"]["app.kubernetes.io/name"],
            "selector"
        ),
        app
    );
    let service_ports: BTreeMap<&str, &str> = list(&service["spec"]["ports"], "service ports")
        .iter()
        .map(|p| {
            (
                text(&p["name"], "name"),
                text(&p["targetPort"], "targetPort"),
            )
        })
        .collect();
    assert_eq!(service_ports["management"], "management");
    assert_eq!(service_ports["cluster"], "cluster");

    // Bootstrap: DNS SRV records of the Service's management port, as many contact points as
    // replicas for the first formation.
    let discovery = &settings
        .management
        .cluster
        .bootstrap
        .contact_point_discovery;
    assert_eq!(settings.discovery.method.as_str(), "dns");
    assert!(
        settings.cluster.seed_nodes.is_empty(),
        "bootstrap runs only without seeds"
    );
    assert_eq!(
        discovery.service_name,
        format!("_management._tcp.{service_name}.shop.svc.cluster.local")
    );
    assert_eq!(discovery.required_contact_point_nr as i64, replicas);

    // Probes on the management port, on the routes that answer them.
    for (probe, path) in [("readinessProbe", "/ready"), ("livenessProbe", "/alive")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["path"], probe), path);
        assert_eq!(text(&get["port"], probe), "management");
    }

    // A graceful leave (hand-off included) fits in the grace period, after the pre-stop pause.
    let grace = Duration::from_secs(int(
        &pod["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    ) as u64);
    let pause = Duration::from_secs(int(
        &container["lifecycle"]["preStop"]["sleep"]["seconds"],
        "preStop sleep",
    ) as u64);
    let handoff = settings.cluster.sharding.handoff_timeout;
    assert!(
        grace > handoff + pause,
        "terminationGracePeriodSeconds {grace:?} must exceed hand-off-timeout {handoff:?} + \
         pre-stop {pause:?}"
    );

    // TLS: the files of the settings are in the mounted Secret's directory, mounted whole
    // (a subPath mount would never see a rotated Secret).
    let tls = &settings.transport.tls;
    assert!(tls.enabled);
    let tls_mount = mount("tls");
    assert!(
        tls_mount["subPath"].is_badvalue(),
        "no subPath for the Secret"
    );
    let tls_dir = text(&tls_mount["mountPath"], "tls mountPath");
    for f in [&tls.cert_file, &tls.key_file, &tls.ca_cert_file] {
        assert_eq!(
            Path::new(f).parent(),
            Some(Path::new(tls_dir)),
            "{f} is in the Secret's directory"
        );
    }
    assert!(!pod_volume(pod, "tls")["secret"]["secretName"].is_badvalue());

    // Disruptions take one pod at a time, of these pods.
    assert_eq!(int(&pdb["spec"]["maxUnavailable"], "pdb maxUnavailable"), 1);
    assert_eq!(
        text(
            &pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            "pdb selector"
        ),
        app
    );
}

fn pod_volume<'a>(pod: &'a Yaml, name: &str) -> &'a Yaml {
    list(&pod["volumes"], "volumes")
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no volume {name}"))
}
