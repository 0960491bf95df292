"""Triton on GPU nodes, Qdrant distributed and the nightly job on Spark on
Kubernetes, held to their images, scripts and the code they run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import yaml

from services.retriever.config import RetrieverSettings
from tests.kubernetes.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    container,
    env,
    executor_template,
    objects,
    of_kind,
    pod,
    render_dir,
)


def dockerfile_cmd(path: str) -> list[str]:
    (line,) = re.findall(r"^CMD (\[.+\])$", (ROOT / path).read_text(), re.MULTILINE)
    return json.loads(line)


def test_triton_on_gpu_nodes_serves_the_gpu_configs():
    docs = objects("gpu")
    triton = container(docs, "triton")
    spec = pod(docs, "triton").spec
    assert triton["image"].startswith("recserve/triton-gpu:")
    assert triton["args"] == dockerfile_cmd("infra/triton/gpu.Dockerfile")
    assert "--model-config-name=gpu" in triton["args"]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    startup = triton["startupProbe"]
    # Model loading (TensorRT engines on the first load): longer than Compose waits.
    compose_gpu = yaml.safe_load((ROOT / "compose.gpu.yaml").read_text())["services"]["triton"]
    window = startup["periodSeconds"] * startup["failureThreshold"]
    assert window >= 2 * int(compose_gpu["healthcheck"]["start_period"].rstrip("s"))
    assert startup["httpGet"]["path"] == "/v2/health/ready"
    shm = {v["name"]: v for v in spec["volumes"]}["shm"]["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": "1Gi"}  # compose.gpu.yaml: shm_size 1g
    cpu = container(objects("cpu"), "triton")
    assert "args" not in cpu and "nvidia.com/gpu" not in str(cpu["resources"])  # the image's CMD


def test_triton_finds_its_repository_and_certificates_where_the_image_looks():
    script = (ROOT / "infra" / "triton" / "start.sh").read_text()
    read = set(re.findall(r'"\$tls/([\w.-]+)"', script))
    for overlay in ("cpu", "gpu"):
        docs = objects(overlay)
        triton = container(docs, "triton")
        mounts = {m["mountPath"]: m for m in triton["volumeMounts"]}
        volumes = {v["name"]: v for v in pod(docs, "triton").spec["volumes"]}
        tls = volumes[mounts["/data/tls"]["name"]]["secret"]["secretName"]
        assert tls == "recserve-tls-triton"
        assert read == {"triton.pem", "triton.key", "ca.pem", "triton-control.secret"}
        command = triton.get("args") or dockerfile_cmd("infra/triton/cpu.Dockerfile")
        (repository,) = [a.split("=", 1)[1] for a in command if a.startswith("--model-repository=")]
        data = mounts["/data/triton"]
        assert (
            repository.startswith("/data/triton/")
            and data["subPath"] == "triton"
            and data["readOnly"]
        )
        assert volumes[data["name"]]["persistentVolumeClaim"]["claimName"] == "recserve-data"
        ranker = env(container(docs, "ranker"))
        assert ranker["RECSERVE_RANKER_TRITON_REPOSITORY"] == repository


def test_qdrant_runs_distributed_with_replicated_shards():
    docs = objects("production")
    qdrant = of_kind(docs, "StatefulSet")["qdrant"]
    variables = env(container(docs, "qdrant"))
    assert variables["QDRANT__CLUSTER__ENABLED"] == "true"
    replication = int(variables["QDRANT__STORAGE__COLLECTION__REPLICATION_FACTOR"])
    peers = qdrant["spec"]["replicas"]
    assert 2 <= replication < peers, "a peer can be lost without losing a shard"
    assert int(variables["QDRANT__STORAGE__COLLECTION__SHARD_NUMBER_PER_NODE"]) >= 1
    budget = of_kind(docs, "PodDisruptionBudget")["qdrant"]["spec"]["maxUnavailable"]
    assert budget <= replication - 1
    headless = of_kind(docs, "Service")[qdrant["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    (script,) = container(docs, "qdrant")["args"]
    p2p = variables["QDRANT__CLUSTER__P2P__PORT"]
    first = f"http://{qdrant['metadata']['name']}-0.{headless['metadata']['name']}:{p2p}"
    assert f'--bootstrap "{first}"' in script and f".{headless['metadata']['name']}:{p2p}" in script
    assert qdrant["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "storage"
    spread = qdrant["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"]: c["whenUnsatisfiable"] for c in spread}[
        "kubernetes.io/hostname"
    ] == "DoNotSchedule"
    # The retriever creates the collection behind the alias these defaults shape.
    assert RetrieverSettings(qdrant_url="http://qdrant:6333").collection == "items"


def spark_conf(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--conf=").split("=", 1) for a in args if a.startswith("--conf="))


def test_the_nightly_job_is_spark_on_kubernetes():
    docs = objects("cpu")
    cron = of_kind(docs, "CronJob")["rescore"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    rescore = container(docs, "rescore")
    args = rescore["args"]
    assert rescore["command"] == ["spark-submit"]
    assert "--master=k8s://https://kubernetes.default.svc:443" in args
    assert "--deploy-mode=client" in args
    conf = spark_conf(args)
    ports = {p["name"]: p["containerPort"] for p in rescore["ports"]}
    assert int(conf["spark.driver.port"]) == ports["driver"]
    assert int(conf["spark.driver.blockManager.port"]) == ports["block-manager"]
    assert conf["spark.kubernetes.namespace"] == "$(POD_NAMESPACE)"
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert conf["spark.kubernetes.container.image"] == "$(EXECUTOR_IMAGE)"
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.data"
    assert conf[f"{volume}.options.claimName"] == "recserve-data"
    assert conf[f"{volume}.mount.path"] == "/data"
    template = executor_template(docs)
    (executor,) = template["spec"]["containers"]
    assert executor["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    mounted = Path(conf["spark.kubernetes.executor.podTemplateFile"])
    mounts = {m["mountPath"]: m["name"] for m in rescore["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs, "rescore").spec["volumes"]}
    files = of_kind(docs, "ConfigMap")[volumes[mounts[str(mounted.parent)]]["configMap"]["name"]][
        "data"
    ]
    assert mounted.name in files and executor["command"][1].rsplit("/", 1)[1] in files
    # The primary file runs `python -m pipelines` with the arguments after it.
    primary = args.index(next(a for a in args if a.endswith(".py")))
    assert Path(args[primary]).name in files
    assert args[primary + 1 : primary + 3] == ["rescore", "run"]
    for env_name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        assert env(rescore)[env_name] == "/opt/venv/bin/python"  # the image's venv


def test_the_job_arguments_are_options_of_rescore_run():
    args = container(objects("cpu"), "rescore")["args"]
    primary = next(i for i, a in enumerate(args) if a.endswith(".py"))
    launcher = K8S / "base" / "rescore" / Path(args[primary]).name
    result = subprocess.run(
        [sys.executable, str(launcher), "rescore", "run", "--help"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for option in args[primary + 3 :]:
        assert option.split("=")[0] in result.stdout, option


def test_the_executor_starts_sparks_kubernetes_backend(tmp_path):
    """executor.sh with a stand-in `java` that prints what it was given: the
    class exists in this pyspark's jars (the image's pin), and Spark's
    executor variables reach it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "java").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (fake / "java").chmod(0o755)
    spark_home = Path(pyspark.__file__).parent
    variables = {
        "PATH": f"{fake}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "SPARK_HOME": str(spark_home),
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.5:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "rescore-exec-3",
        "SPARK_JAVA_OPT_1": "-Dspark.driver.blockManager.port=7079",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
    }
    script = K8S / "base" / "rescore" / "executor.sh"
    result = subprocess.run(
        [shutil.which("bash"), str(script), "executor"],
        capture_output=True, text=True, timeout=60, env=variables,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    argv = result.stdout.splitlines()
    assert argv[:2] == ["-Dspark.driver.port=7078", "-Dspark.driver.blockManager.port=7079"]
    main = argv.index("org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
    assert argv[argv.index("-cp") + 1] == f"{spark_home}/conf:{spark_home}/jars/*"
    flags = dict(zip(argv[main + 1 :: 2], argv[main + 2 :: 2], strict=True))
    assert flags["--executor-id"] == "3" and flags["--hostname"] == "10.0.0.9"
    assert flags["--podName"] == "rescore-exec-3" and flags["--driver-url"].endswith(":7078")
    class_file = "org/apache/spark/scheduler/cluster/k8s/KubernetesExecutorBackend.class"
    jars = sorted((spark_home / "jars").glob("spark-kubernetes_*.jar"))
    assert jars and class_file in zipfile.ZipFile(jars[0]).namelist()


def test_executors_run_the_drivers_image_in_every_overlay_and_after_images(tmp_path):
    for overlay in OVERLAYS:
        rescore = container(objects(overlay), "rescore")
        assert env(rescore)["EXECUTOR_IMAGE"] == rescore["image"], overlay
    # An overlay that points the images at a registry (kustomize edit set image).
    tree = tmp_path / "kubernetes"
    shutil.copytree(K8S, tree)
    kustomization = tree / "overlays" / "production" / "kustomization.yaml"
    pushed = "registry.example.com/recserve/pipelines"
    text = (
        kustomization.read_text()
        + f"images:\n  - name: recserve/pipelines\n    newName: {pushed}\n"
    )
    kustomization.write_text(text)
    docs = [d for d in yaml.safe_load_all(render_dir(tree / "overlays" / "production")) if d]
    rescore = container(docs, "rescore")
    assert rescore["image"].startswith(pushed + ":")
    assert env(rescore)["EXECUTOR_IMAGE"] == rescore["image"]
    assert os.path.basename(container(docs, "recserve-init", "build")["image"]).startswith(
        "pipelines:"
    )
