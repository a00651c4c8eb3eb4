"""The deploy files agree with each other and with the service, as far as can be checked without
a container engine: the compose file and the manifests parse, every file they mount or build
from exists, every jurystream setting they give is one `jurystream check-config` accepts, and the
ports, topics and addresses the broker, jurystream, Prometheus and Grafana name for each other
are the same, and the alerting rules pass promtool's unit tests (tests/rules/). (`docker compose
up` itself is not run here: see the README.)"""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose():
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def dockerfile_env():
    text = (DEPLOY / "Dockerfile").read_text()
    return dict(re.findall(r"(JURYSTREAM_[A-Z_]+)=(\S+)", text))


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def published(service):
    return {int(p.split(":")[1].split()[0]) for p in service["ports"]}


def mounts(service):
    """(host path, container path) of each bind mount, the host path relative to deploy/."""
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        yield (DEPLOY / host).resolve(), container


def test_the_stack_has_every_part_and_every_mounted_file_exists():
    services = compose()["services"]
    assert set(services) == {"kafka", "jurystream", "producer", "prometheus", "grafana"}
    for name, service in services.items():
        for host, _ in mounts(service):
            assert host.is_file(), f"{name} mounts {host}, which does not exist"
    build = services["jurystream"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).is_file()
    # The Dockerfile copies only what the build context keeps (.dockerignore).
    ignored = (ROOT / ".dockerignore").read_text().split()
    for kept in ["src/", "Cargo.lock", "config/jurystream.toml"]:
        assert not any(kept.startswith(i) for i in ignored), kept
    for heavy in ["target/", ".venv/", ".venv-peers/", ".git/"]:
        assert heavy in ignored


def test_the_broker_runs_in_kraft_mode_and_jurystream_reaches_it():
    services = compose()["services"]
    kafka = services["kafka"]["environment"]
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"]
    assert not any("ZOOKEEPER" in key for key in kafka)
    listeners = dict(l.split("://") for l in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))
    jurystream = services["jurystream"]["environment"]
    assert jurystream["JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS"] == listeners["INTERNAL"]
    assert services["producer"]["environment"]["BOOTSTRAP_SERVERS"] == listeners["INTERNAL"]
    assert port_of(listeners["EXTERNAL"]) in published(services["kafka"])


def test_every_jurystream_setting_is_one_the_service_accepts():
    env = {**dockerfile_env(), **compose()["services"]["jurystream"]["environment"]}
    out = subprocess.run(
        ["cargo", "run", "-q", "--", "--config", "config/jurystream.toml", "check-config"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    for name, value in env.items():
        key = name.removeprefix("JURYSTREAM_").lower().replace("__", ".")
        line = next(l for l in out.stdout.splitlines() if l.startswith(f"{key} = "))
        assert value in line and name in line, line


def test_ports_agree_between_the_image_the_stack_prometheus_and_kubernetes():
    env = dockerfile_env()
    http, admin = port_of(env["JURYSTREAM_HTTP__BIND"]), port_of(env["JURYSTREAM_HTTP__ADMIN_BIND"])
    exposed = set(map(int, re.search(r"EXPOSE ([\d ]+)", (DEPLOY / "Dockerfile").read_text())
                      .group(1).split()))
    assert exposed == {http, admin}
    services = compose()["services"]
    assert published(services["jurystream"]) == {http, admin}
    advertised = services["jurystream"]["environment"]["JURYSTREAM_HTTP__ADVERTISED_URL"]
    assert advertised == f"http://jurystream:{http}"
    # The stack's Prometheus scrapes the admin listener and loads the shipped rules.
    prometheus = services["prometheus"]
    config_file = dict((c, h) for h, c in mounts(prometheus))["/etc/prometheus/prometheus.yml"]
    scrape = yaml.safe_load(config_file.read_text())
    assert scrape["scrape_configs"][0]["static_configs"][0]["targets"] == [f"jurystream:{admin}"]
    mounted = {c for _, c in mounts(prometheus)}
    assert set(scrape["rule_files"]) <= mounted
    # The standalone scrape configuration names the same port.
    standalone = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert [port_of(t) for t in standalone["scrape_configs"][0]["static_configs"][0]["targets"]] == [admin]
    # Kubernetes: the same ports, the probes on the admin one, an image built here.
    docs = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert {p["containerPort"] for p in container["ports"]} == {http, admin}
    assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == admin
    assert container["image"] == services["jurystream"]["image"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert f"-t {container['image']}" in (DEPLOY / "Dockerfile").read_text()


def test_the_allocator_settings_agree_between_the_deploy_files_and_the_benchmarks():
    """The allocator settings are environment variables copied into every deploy file and both
    benchmark harnesses (docs/architecture.md, "Memory and the allocators"): the figures are
    measured with what is deployed only while the copies are the same."""
    names = ("MIMALLOC_ALLOW_THP", "GLIBC_TUNABLES")
    docker = (DEPLOY / "Dockerfile").read_text()
    service = (DEPLOY / "jurystream.service").read_text()
    docs = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]
    k8s = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    peers = (ROOT / "benches" / "peers" / "run.py").read_text()
    load = (ROOT / "benches" / "load.rs").read_text()
    for name in names:
        copies = {
            "Dockerfile": re.findall(rf"{name}=(\S+)", docker),
            "jurystream.service": re.findall(rf"Environment={name}=(\S+)", service),
            "kubernetes.yaml": [k8s.get(name)],
            "peers/run.py": re.findall(rf'{name}="([^"]+)"', peers),
            "load.rs": re.findall(rf'"{name}",\s*"([^"]+)"', load),
        }
        values = {v for found in copies.values() for v in found}
        assert all(len(found) == 1 for found in copies.values()), (name, copies)
        assert len(values) == 1, (name, copies)


def test_grafana_reads_the_stacks_prometheus_and_the_dashboard():
    services = compose()["services"]
    grafana = {c: h for h, c in mounts(services["grafana"])}
    datasource = yaml.safe_load(
        grafana["/etc/grafana/provisioning/datasources/jurystream.yml"].read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    assert 9090 in published(services["prometheus"])
    provider = yaml.safe_load(
        grafana["/etc/grafana/provisioning/dashboards/jurystream.yml"].read_text())
    path = provider["providers"][0]["options"]["path"]
    dashboard = next(h for c, h in grafana.items() if c.startswith(path + "/"))
    assert dashboard == ROOT / "grafana" / "jurystream.json"
    names = [v["name"] for v in json.loads(dashboard.read_text())["templating"]["list"]]
    assert names == ["datasource", "job", "instance"]


def test_the_producer_streams_the_demo_to_the_topics_jurystream_reads():
    topics = tomllib.loads((ROOT / "config" / "jurystream.toml").read_text())["topics"]
    inputs = {topics["votes"], topics["judge_scores"], topics["reputations"]}
    producer = compose()["services"]["producer"]
    files = {c: h for h, c in mounts(producer)}
    demo = files[producer["environment"]["DEMO_FILE"]]
    sent = {json.loads(l)["topic"] for l in demo.read_text().splitlines() if l.strip()}
    assert sent <= inputs
    # Each round's ids are new and its times current, so the rounds do not repeat each other.
    spec = importlib.util.spec_from_file_location("producer", files["/demo/producer.py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value = {"event_id": "ev-1", "session_id": "s", "occurred_at": "2026-11-20T10:00:00Z"}
    fresh = module.fresh(value, 3)
    assert (fresh["event_id"], fresh["session_id"]) == ("ev-1-r3", "s-r3")
    assert fresh["occurred_at"] > "2026-11-28"
    assert module.fresh("not json", 3) == "not json"


def test_the_alerting_rules_fire_on_what_they_say_and_not_before():
    # promtool's unit tests of the rules (scripts/test.sh installs Debian's prometheus).
    out = subprocess.run(["promtool", "test", "rules", "tests/rules/late-and-stalled.test.yml"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
