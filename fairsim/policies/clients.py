"""The fairness class ("client") of a request, for the per-client policies (DRR, DRR-Dynamo, VTC,
DLPM).

VTC and DLPM are defined over clients (tenants, users); Dynamo's router queue over request
classes. A fairsim trace rarely carries a tenant, so the class is the first label that exists
(docs/POLICIES-more.md, "Which label is the client"; the fallback order is our choice):

1. the trace's ``tenant`` label (``Request.labels["tenant"]``);
2. the request's ``session_id`` (a conversation or agent run);
3. the trace's ``doc_id`` label: the document a question is about, the natural tenant of a
   document-Q&A service (the generated SEC, RAG, multi-hop, mixed and flood traces set it);
4. none: the request is its own class (the Mooncake and Azure traces). DRR then shares the
   engine among single requests by tokens (short requests first, long ones after a few rounds),
   VTC is FCFS, DLPM is LPM gated by one quantum per request.

The first block's content key is not used: in almost every trace it is a system prompt shared by
all requests, which would make one class of everything. In the live hook vLLM's ``Request`` has
no tenant, session or document; the class there is ``cache_salt`` (vLLM's per-tenant cache
isolation salt) when set, else none.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from fairsim.types import QueuedRequest, Request


def _hashable(value: Any) -> Hashable:
    """``value``, or for a JSON list or object (a trace label may be one, and neither can key a
    dict) a tuple equal for equal contents: ``(list, items)`` or ``(dict, items sorted by key)``,
    the type kept so that a list and an object never name one client."""
    if isinstance(value, list):
        return (list, tuple(map(_hashable, value)))
    if isinstance(value, dict):
        return (dict, tuple(sorted((k, _hashable(v)) for k, v in value.items())))
    return value


def client_of_request(req: Request, block_keys: Sequence[Hashable] = ()) -> Hashable | None:
    """The class label the simulator puts in ``QueuedRequest.client`` (order in the module doc).

    Args:
        req: The trace request.
        block_keys: The engine's content keys of the request's full KV blocks (unused; kept so
            a class rule over content can be added without touching the engine).

    Returns:
        ``("tenant", label)``, ``("session", id)``, ``("doc", doc_id)`` or ``None``; the tag keeps
        a tenant named like a session id apart from it. A label that is a JSON list or object
        is made hashable (``_hashable``): equal values are one client.
    """
    labels = req.labels
    tenant = labels.get("tenant") if labels else None
    if tenant is not None:
        return ("tenant", _hashable(tenant))
    if req.session_id is not None:
        return ("session", req.session_id)
    doc = labels.get("doc_id") if labels else None
    if doc is not None:
        return ("doc", _hashable(doc))
    return None


def client_of_vllm(request: Any) -> Hashable | None:
    """The class label the live hook puts in ``QueuedRequest.client`` for a vLLM ``Request``.

    ``("tenant", cache_salt)`` when the request has a ``cache_salt``, else ``None``.
    """
    salt = getattr(request, "cache_salt", None)
    return None if salt is None else ("tenant", salt)


def client_key(r: QueuedRequest) -> Hashable:
    """The class a policy charges: ``r.client``, or the request itself when it has none."""
    return r.client if r.client is not None else ("request", r.request_id)
