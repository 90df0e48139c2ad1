"""The operator's procedures of deploy/README.md, run for real where a cluster is not
needed. Backup (section 10): the online-backup snippet copies a live audit store that
keeps writing (WAL mode) into a copy whose hash chain verifies with the README's own
``stockade audit verify --db``; the restore pod the README starts is valid, meets the
namespace's restricted profile and mounts the claim the StatefulSet really creates (the
PostgreSQL commands run in test_postgres_component.py). Key rotation (section 11): the
README's patch renders on prod and gives the executor both public keys."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import kubernetes_validate

from stockade.audit.model import AuditEventRow
from stockade.audit.store.sqlite import AuditStore

from .conftest import Manifest, render, workload
from .test_render import K8S_VERSION

README = Path(__file__).resolve().parents[2] / "deploy" / "README.md"
POD_STATE = "/var/lib/stockade"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _backup_snippet() -> str:
    match = re.search(r"exec audit-0 -- python -c '(.*?)'", _section("## 10."), re.S)
    assert match, "deploy/README.md section 10 has no online-backup snippet"
    return match.group(1)


def _event(n: int) -> AuditEventRow:
    return AuditEventRow(
        event_id=f"bk-e{n}",
        session_id="backup",
        step=n % 8,
        tool_name="read_file",
        status="OK",
        output_preview=f"output {n}",
        time_ns=1_700_000_000_000_000_000 + n * 1_000_000,
        call_id=f"call-{n}",
        verdict="ALLOW",
    )


async def test_online_backup_of_a_live_store_verifies(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    code = _backup_snippet().replace(POD_STATE, str(state))
    assert str(state / "audit.db") in code and str(state / "backup.db") in code
    store = await AuditStore.open(state / "audit.db")
    try:
        await store.append([_event(i) for i in range(200)])
        # The service keeps writing while the backup runs; the copy is a consistent
        # prefix of the chain, whatever the interleaving.
        writing = asyncio.create_task(_keep_writing(store, 200, 400))
        backup = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE
        )
        _, err = await backup.communicate()
        await writing
        assert backup.returncode == 0, err.decode()
    finally:
        await store.close()
    # The README's own check of the copy, offline.
    verify = subprocess.run(
        [
            str(Path(sys.executable).parent / "stockade"),
            "audit",
            "verify",
            "--db",
            str(state / "backup.db"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    result = json.loads(verify.stdout)
    assert result["ok"] is True
    rows = int(result["rowsChecked"])
    assert 200 <= rows <= 400, result


async def _keep_writing(store: AuditStore, first: int, last: int) -> None:
    for start in range(first, last, 10):
        await store.append([_event(i) for i in range(start, start + 10)])
        await asyncio.sleep(0)


def _restore_pod() -> Manifest:
    section = _section("## 10.").replace("\\\n", " ")
    match = re.search(
        r"kubectl -n stockade run restore-audit (.*?)--overrides='(\{.*?\})'", section
    )
    assert match, "deploy/README.md section 10 has no restore pod"
    pod: Manifest = json.loads(match.group(2))
    pod.setdefault("kind", "Pod")
    pod.setdefault("metadata", {"name": "restore-audit", "namespace": "stockade"})
    return pod


def test_the_restore_pod_is_valid_restricted_and_mounts_the_real_claim(
    rendered: dict[str, list[Manifest]],
) -> None:
    pod = _restore_pod()
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    spec = pod["spec"]
    # What the namespace's restricted Pod Security profile demands, or the pod is refused.
    assert spec["automountServiceAccountToken"] is False
    ctx = spec["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == 10001
    assert ctx["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = spec["containers"]
    c_ctx = container["securityContext"]
    assert c_ctx["allowPrivilegeEscalation"] is False
    assert c_ctx["capabilities"]["drop"] == ["ALL"]
    assert c_ctx["readOnlyRootFilesystem"] is True
    # The claim a StatefulSet creates is <template>-<statefulset>-<ordinal>.
    audit = workload(rendered["dev"], "audit")
    template = audit["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    (volume,) = spec["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == f"{template}-audit-0"
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["mountPath"] == POD_STATE
    # The service's own user, so the restored file is the service's to write.
    service_ctx = audit["spec"]["template"]["spec"]["securityContext"]
    assert (ctx["runAsUser"], ctx["fsGroup"]) == (
        service_ctx["runAsUser"],
        service_ctx["fsGroup"],
    )


# --- grant-key rotation (section 11) --------------------------------------------------------


def _rotation_patch() -> str:
    match = re.search(r"```yaml\n(\s*# rotation\.yaml.*?)```", _section("## 11."), re.S)
    assert match, "deploy/README.md section 11 has no rotation.yaml"
    return textwrap.dedent(match.group(1))


def test_the_rotation_patch_renders_and_projects_both_public_keys(tmp_path: Path) -> None:
    """The README's patch, applied to the prod overlay as the README says, gives the
    executor both public keys and names the second in its settings — and still no
    private key."""
    (tmp_path / "rotation.yaml").write_text(_rotation_patch())
    prod = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "overlays" / "prod"
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources: [{os.path.relpath(prod, tmp_path)}]\n"
        "patches:\n"
        "  - path: rotation.yaml\n"
    )
    objs = render(tmp_path)
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    executor = workload(objs, "executor")
    spec = executor["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "grant-verify")
    assert volume["secret"]["secretName"] == "stockade-grant-verify"
    items = {i["key"]: i["path"] for i in volume["secret"]["items"]}
    assert items == {
        "grant-signing.pub": "grant-signing.pub",
        "grant-signing-next.pub": "grant-signing-next.pub",
    }
    # The Secret's other settings survive the patch (mode 0440).
    assert volume["secret"]["defaultMode"] == 0o440
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "grant-verify")
    first = env["STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE"]
    extra = env["STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILES"]
    assert first == f"{mount['mountPath']}/grant-signing.pub"
    assert extra == f"{mount['mountPath']}/grant-signing-next.pub"
    # Rotation never brings the private key near the executor.
    assert "stockade-grant-signing" not in json.dumps(executor)
    # Both names are the executor's settings (a typo would be silently ignored).
    from stockade.executor.settings import ExecutorSettings

    from .test_settings_wiring import _accepted_names

    accepted = _accepted_names(ExecutorSettings)
    assert {
        "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE",
        "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILES",
    } <= accepted
