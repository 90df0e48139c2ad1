"""The classifier's model: the shared LLM provider interface (``stockade.llm``,
OpenAI-compatible or scripted) adapted to the one call the classifier makes, and built
from the decision settings."""

from __future__ import annotations

from collections.abc import Callable

from stockade.decision.classifier import (
    DEFAULT_PROMPT,
    Classifier,
    ClassifierVerdict,
    validate_prompt,
)
from stockade.decision.settings import DecisionSettings
from stockade.errors import InvalidArgument
from stockade.llm.base import Message, Provider
from stockade.llm.openai import OpenAIConfig, OpenAIProvider
from stockade.llm.scripted import ScriptedProvider, load_script


class ProviderModel:
    """A ``CompletionModel`` over any ``stockade.llm`` ``Provider``: system + user in, text out."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider

    async def answer(self, system: str, user: str) -> str:
        """The model's text answer; no tools are offered."""
        turn = await self._provider.complete(
            [Message("system", system), Message("user", user)], [], allow_tools=False
        )
        return turn.text


def build_classifier(
    settings: DecisionSettings,
    on_verdict: Callable[[ClassifierVerdict], None] | None = None,
) -> tuple[Classifier | None, OpenAIProvider | None]:
    """The configured classifier (None when AUTO_PROVIDER is ``none``) and the HTTP provider
    to close at shutdown; raises InvalidArgument naming the setting that is wrong."""
    prompt = DEFAULT_PROMPT
    if settings.auto_prompt_file is not None:
        try:
            prompt = settings.auto_prompt_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(
                f"STOCKADE_DECISION_AUTO_PROMPT_FILE: cannot read {settings.auto_prompt_file}: "
                f"{exc.strerror}"
            ) from None
        try:
            validate_prompt(prompt)
        except InvalidArgument as exc:
            raise InvalidArgument(f"STOCKADE_DECISION_AUTO_PROMPT_FILE: {exc}") from None
    closable: OpenAIProvider | None = None
    if settings.auto_provider == "none":
        return None, None
    if settings.auto_provider == "openai":
        if not settings.auto_openai_base_url or not settings.auto_openai_model:
            raise InvalidArgument(
                "STOCKADE_DECISION_AUTO_PROVIDER=openai needs "
                "STOCKADE_DECISION_AUTO_OPENAI_BASE_URL and STOCKADE_DECISION_AUTO_OPENAI_MODEL"
            )
        closable = OpenAIProvider(
            OpenAIConfig(
                base_url=settings.auto_openai_base_url,
                model=settings.auto_openai_model,
                api_key=settings.auto_openai_api_key,
                timeout_s=settings.auto_timeout_s,
                # One retry at most: the classification's own timeout bounds the wait, and a
                # person answering is the fallback, not a longer wait.
                max_retries=1,
                backoff_max_s=min(2.0, settings.auto_timeout_s / 2),
                temperature=0.0,
                max_tokens=200,
            )
        )
        model = ProviderModel(closable)
        name = settings.auto_openai_model
    else:
        script = settings.auto_script_file
        if script is None:
            raise InvalidArgument(
                "STOCKADE_DECISION_AUTO_PROVIDER=scripted needs STOCKADE_DECISION_AUTO_SCRIPT_FILE"
            )
        model = ProviderModel(ScriptedProvider(load_script(script.parent, script.name)))
        name = f"scripted:{script.name}"
    classifier = Classifier(
        model,
        model_name=name,
        prompt=prompt,
        timeout_s=settings.auto_timeout_s,
        budget_per_session=settings.auto_budget_per_session,
        cache_size=settings.auto_cache_size,
        on_verdict=on_verdict,
    )
    return classifier, closable
