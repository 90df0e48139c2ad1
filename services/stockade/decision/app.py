"""The decision service's composition root: opens the session store, the policy, the
signing key, the classifier and the audit recorder; builds the core and the servicer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from stockade.client.audit import AuditRecorder
from stockade.client.base import TlsConfig
from stockade.decision.approvals import ApprovalLimits
from stockade.decision.classifier_model import build_classifier
from stockade.decision.core import DecisionCore
from stockade.decision.grants import (
    PRIVATE_KEY_NAME,
    GrantSigner,
    generate_keypair,
    load_private_key,
)
from stockade.decision.metrics import DecisionMetrics
from stockade.decision.modes import parse_mode
from stockade.decision.policy import PolicyStore, rule_lists_doc
from stockade.decision.records import RECORDS_LOGGER, DecisionSink, log_sink
from stockade.decision.servicer import DecisionServicer
from stockade.decision.settings import DecisionSettings
from stockade.decision.shadow import ShadowPolicy
from stockade.decision.store import open_decision_store
from stockade.server import Registration, ServingState
from stockade.server.access import AdminAuth
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

SERVICE_NAME = d_pb2.DESCRIPTOR.services_by_name["DecisionService"].full_name
DB_NAME = "decision.db"

log = logging.getLogger(__name__)


def policy_store(settings: DecisionSettings, path: Path | None = None) -> PolicyStore:
    """The policy file (or ``path``, for the shadow policy) plus the settings' rule lists
    and limits (ENV source)."""
    env = rule_lists_doc(
        settings.deny,
        settings.ask,
        settings.allow,
        limits={
            "denial_max_consecutive": settings.denial_max_consecutive,
            "denial_max_total": settings.denial_max_total,
            "approval_timeout_seconds": settings.approval_timeout_s,
        },
    )
    # An explicitly configured mode overrides the policy file's; otherwise the file decides.
    override = (
        parse_mode(settings.default_mode) if "default_mode" in settings.model_fields_set else None
    )
    return PolicyStore(
        path if path is not None else settings.policy_file,
        env,
        cwd=settings.workspace,
        mode_override=override,
        project_path=settings.project_policy_file,
    )


def signer_for(settings: DecisionSettings) -> GrantSigner:
    """The grant signer: the configured key, else a key pair kept in the state folder."""
    if settings.grant_private_key_file is not None:
        key = load_private_key(settings.grant_private_key_file)
    else:
        state = Path(settings.state_dir)
        path = state / PRIVATE_KEY_NAME
        if not path.exists():
            generate_keypair(state)
        key = load_private_key(path)
        log.warning(
            "no grant_private_key_file set: signing grants with %s; give the executor %s",
            path,
            state / "grant_public_key.pem",
        )
    return GrantSigner(key, ttl_s=settings.grant_ttl_s)


def store_path(settings: DecisionSettings) -> Path:
    """The session database file."""
    return Path(settings.state_dir) / DB_NAME


def describe_policy(policies: PolicyStore) -> str:
    """What the start-up line says about the policy: where it came from, its version,
    its mode and how many rules of each effect (so an operator sees at once whether the
    intended file was loaded)."""
    policy = policies.current
    counts = {effect: 0 for effect in ("deny", "ask", "allow")}
    for rule in policy.rules:
        effect = str(getattr(rule.effect, "value", rule.effect)).lower()
        counts[effect] = counts.get(effect, 0) + 1
    files = [str(p) for p in (policies.path, policies.project_path) if p is not None]
    return (
        f"policy {', '.join(files) or '(no file: environment rules only)'} "
        f"version {policy.version} mode {getattr(policy.mode, 'value', policy.mode)}: "
        f"{counts['deny']} deny, {counts['ask']} ask, {counts['allow']} allow rules"
    )


def approval_limits(settings: DecisionSettings) -> ApprovalLimits:
    """The ask flow's bounds from the settings."""
    return ApprovalLimits(
        max_pending=settings.max_pending_approvals,
        max_pending_per_session=settings.max_pending_approvals_per_session,
        max_watchers=settings.max_approval_watchers,
        watch_queue=settings.approval_watch_queue,
        retention_s=settings.approval_retention_s,
        reattach_s=settings.approval_reattach_s,
        sweep_s=settings.approval_sweep_s,
    )


@dataclass
class DecisionApp:
    """ServiceApp for the decision service."""

    settings: DecisionSettings
    name: str = "decision"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open the session database, load the policy, start reloading; close on exit."""
        s = self.settings
        policies = policy_store(s)
        store = await open_decision_store(
            s.store_dsn,
            str(store_path(s)),
            cache_max_sessions=s.session_cache_max,
            max_session_rules=s.max_session_rules,
            pool_size=s.store_pool_size,
        )
        # Readiness follows the store: a replica on a shared store that has lost its change
        # feed reports NOT_SERVING until it has caught up, so calls go to replicas that
        # see every change (it still answers what reaches it, from the database).
        serving = ServingState()
        store.on_health(serving.set)
        log.info("decision loaded %s", describe_policy(policies))
        shadow = None
        if s.shadow_policy_file is not None:
            shadow_policies = policy_store(s, s.shadow_policy_file)
            shadow = ShadowPolicy(shadow_policies)
            log.info("decision shadow mode: candidate %s", describe_policy(shadow_policies))
        metrics = DecisionMetrics()
        classifier, model_client = build_classifier(
            s, lambda v: metrics.record_classifier(v.outcome, v.latency_s, cached=v.cached)
        )
        if classifier is not None:
            log.info("decision auto mode classifier: %s", classifier.model_name)
        core = DecisionCore(
            policies,
            store,
            signer_for(s),
            approval_limits=approval_limits(s),
            shadow=shadow,
            classifier=classifier,
            metrics=metrics,
        )
        # Pending approvals are read now, so those left by a restart start their
        # re-attach window at once.
        await core.broker.load()
        sweeper = asyncio.create_task(core.broker.run_sweeper())
        watcher = asyncio.create_task(policies.watch(s.policy_poll_s))
        tasks = [watcher, sweeper]
        if shadow is not None:
            tasks.append(asyncio.create_task(shadow.policies.watch(s.policy_poll_s)))

        def reload_all() -> None:
            policies.reload()
            if shadow is not None:
                shadow.policies.reload()

        loop = asyncio.get_running_loop()
        sighup = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, reload_all)
            sighup = True
        recorder: AuditRecorder | None = None
        # Without an audit service the records go to the log (when it is on for them).
        records: DecisionSink | None = (
            log_sink if logging.getLogger(RECORDS_LOGGER).isEnabledFor(logging.INFO) else None
        )
        if s.audit_addr:
            tls = (
                TlsConfig(s.tls_cert_file, s.tls_key_file, s.tls_ca_file)
                if s.tls_cert_file and s.tls_key_file and s.tls_ca_file
                else None
            )
            # Written ahead to a spool in the state folder, sent in batches, replayed while
            # the audit service is down (AUD-4): a Decide never waits on the network.
            recorder = AuditRecorder(
                s.audit_addr, Path(s.state_dir) / "decision-audit.spool", tls=tls
            )
            await recorder.start()
            records = recorder.enqueue
        else:
            log.info("no audit_addr set: decision records go to the log only")
        core.records = records
        try:
            yield [
                Registration(
                    d_grpc.add_DecisionServiceServicer_to_server,
                    DecisionServicer(core),
                    SERVICE_NAME,
                    serving=serving,
                    admin=AdminAuth(
                        s.admin_tokens,
                        s.admin_identities,
                        s.delegate_identities,
                        configure_hint="set STOCKADE_DECISION_ADMIN_TOKENS or "
                        "STOCKADE_DECISION_ADMIN_IDENTITIES",
                    ),
                )
            ]
        finally:
            if sighup:
                loop.remove_signal_handler(signal.SIGHUP)
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await store.close()
            if model_client is not None:
                await model_client.aclose()
            if recorder is not None:
                await recorder.close()
