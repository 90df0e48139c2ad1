"""The SQLite backup and restore of deploy/README.md, section 10, run for real where a
cluster is not needed: the online-backup snippet copies a live audit store that keeps
writing (WAL mode) into a copy whose hash chain verifies with the README's own
``stockade audit verify --db``; the restore pod the README starts is valid, meets the
namespace's restricted profile and mounts the claim the StatefulSet really creates."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate

from stockade.audit.model import AuditEventRow
from stockade.audit.store import AuditStore

from .conftest import Manifest, workload
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
