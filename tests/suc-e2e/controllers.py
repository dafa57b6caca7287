#!/usr/bin/env python3
"""Runs the controller under test as a process for every controller Deployment of SUC's e2e suite.

SUC's e2e framework (e2e/framework/framework.go, setupController) creates, in the namespace of each
spec, a ServiceAccount bound to cluster-admin and a Deployment of the image
rancher/system-upgrade-controller:latest, labelled upgrade.cattle.io/controller=<namespace>, and
waits until it is available. On the local cluster kwok runs that pod without running anything, so
this watcher stands in for the container: for each such Deployment whose pod is scheduled it
starts CONTROLLER with the Deployment container's environment (the fieldRefs resolved as the
kubelet would: metadata.namespace, spec.nodeName, metadata.name), plus the kubeconfig, and stops
the process when the Deployment or its namespace goes away.

    controllers.py --kubeconfig FILE --controller BINARY --log-dir DIR [--env K=V]... [--arg ARG]...

Only the standard library and kubectl. It polls (once a second): a spec's Deployment lives for the
spec's duration, tens of seconds.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

LABEL = "upgrade.cattle.io/controller"


def log(msg):
    print(f"suc-e2e controllers: {msg}", file=sys.stderr, flush=True)


def kubectl(kubeconfig, *args):
    out = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout)


def resolve_env(container, pod):
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if not ref:
            log(f"ignoring env {e['name']}: only values and fieldRefs are supported")
            continue
        path = ref["fieldPath"]
        if path == "metadata.namespace":
            env[e["name"]] = pod["metadata"]["namespace"]
        elif path == "metadata.name":
            env[e["name"]] = pod["metadata"]["name"]
        elif path == "spec.nodeName":
            env[e["name"]] = pod["spec"].get("nodeName", "")
        elif path == "spec.serviceAccountName":
            env[e["name"]] = pod["spec"].get("serviceAccountName", "")
        else:
            log(f"ignoring env {e['name']}: fieldRef {path} is not supported")
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--controller", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--env", action="append", default=[], help="extra K=V for every controller")
    ap.add_argument("--arg", action="append", default=[], help="argument of every controller (slipway: run)")
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    kubeconfig = os.path.abspath(a.kubeconfig)
    os.makedirs(a.log_dir, exist_ok=True)
    extra = dict(kv.split("=", 1) for kv in a.env)

    procs = {}  # (namespace, deployment) -> Popen
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def terminate(key):
        p = procs.pop(key)
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log(f"stopped the controller of {key[0]}/{key[1]} (exit {p.returncode})")

    while not stopping:
        try:
            deps = kubectl(kubeconfig, "get", "deployments", "--all-namespaces", "-l", LABEL, "-o", "json")["items"]
            live = {}
            for d in deps:
                if d["metadata"].get("deletionTimestamp"):
                    continue
                live[(d["metadata"]["namespace"], d["metadata"]["name"])] = d
            for key in [k for k in procs if k not in live]:
                terminate(key)
            for key, d in live.items():
                if key in procs:
                    if procs[key].poll() is not None:
                        log(f"the controller of {key[0]}/{key[1]} exited with {procs[key].returncode}; not restarted")
                    continue
                sel = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
                pods = kubectl(kubeconfig, "get", "pods", "-n", key[0], "-l", sel, "-o", "json")["items"]
                pods = [p for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
                if not pods:
                    continue  # not scheduled yet
                pod = pods[0]
                container = d["spec"]["template"]["spec"]["containers"][0]
                env = {k: os.environ[k] for k in ("PATH", "HOME", "TZ", "TMPDIR") if k in os.environ}
                env.update(resolve_env(container, pod))
                env["SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG"] = kubeconfig
                env["KUBECONFIG"] = kubeconfig
                env.update(extra)
                # The framework's container has neither command nor args (the image's entrypoint).
                argv = [a.controller] + a.arg + list(container.get("args") or [])
                logf = open(os.path.join(a.log_dir, f"{key[0]}.log"), "ab")
                procs[key] = subprocess.Popen(argv, env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                logf.close()
                shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(("SYSTEM_UPGRADE", "SLIPWAY")))
                log(f"started the controller of {key[0]}/{key[1]} (pid {procs[key].pid}): {shown}")
        except Exception as e:  # a transient API error: try again at the next tick
            log(f"poll failed: {e}")
        time.sleep(a.interval)
    for key in list(procs):
        terminate(key)


if __name__ == "__main__":
    main()
