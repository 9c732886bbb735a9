"""Network egress: the policy a run is held to, decided and enforced by the host."""

from wasm_runner.egress.credentials import CredentialBroker, MissingSecretError
from wasm_runner.egress.policy import Destination, EgressRules, PolicyError, parse_destination
from wasm_runner.egress.resolver import Plan, Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner_protocol.egress import DENY, Credential, EgressPolicy, NetworkEvent

__all__ = ["DENY", "Credential", "CredentialBroker", "Destination", "EgressPolicy", "EgressRules", "EgressSettings",
           "MissingSecretError", "NetworkEvent", "Plan", "PolicyError", "Resolver", "parse_destination"]
