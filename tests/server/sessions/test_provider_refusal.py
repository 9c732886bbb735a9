"""A request no provider runs is a 422 provider_unavailable decided by the core's typed error
(NoProviderError), never by what an error's message happens to say."""

from __future__ import annotations

import pytest

from wasm_runner import NoProviderError
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.sessions.execution import provider_refusal


def test_a_missing_provider_is_a_422_whatever_its_message_says() -> None:
    with pytest.raises(ApiError) as refused, provider_refusal():
        raise NoProviderError("nothing here runs 'cobol' (available: python, javascript)")
    assert refused.value.status == 422 and refused.value.code == ErrorCode.PROVIDER_UNAVAILABLE
    assert "cobol" in refused.value.message and refused.value.hint


def test_another_error_that_names_a_provider_is_not_taken_for_one() -> None:
    with pytest.raises(ValueError, match="provider") as raised, provider_refusal():
        raise ValueError("the provider's scratch directory is not writable")
    assert not isinstance(raised.value, ApiError)
