"""The engine's side of its native lane (runtime_ext/lane/): which routes it may serve, and what
a lane request it declined asks for.

Every served model version's method has a route id for as long as it serves (catalog.Served);
the fronts' model table names the ones the lane may serve (ModelService.lane_routes), and a
front sends a request to one of them as a lane request (service/shared/lane_frames.py). The lane
declines what it cannot run at once, and the engine's Python serves that message as it serves
any: read_message turns it back into the inference message it stands for. A route that stopped
serving is remembered a while (a request may have been on its way), so that such a request is
still served, by name and checked again, as it would have been before the lane existed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from service.shared import frames, lane_frames, messages

# Routes kept after they stopped serving (each a few names).
_RETIRED_KEPT = 4096


class RouteTarget(NamedTuple):
    """What a route id names: a served model version's method, and its tensors' names."""

    model: str
    version: str
    method: str
    inputs: list[tuple[str, str]]  # (name, datatype) of each input, in the method's order
    outputs: list[str]  # names of the outputs, in the method's order


class LaneRoutes:
    def __init__(self):
        self._routes: dict[int, RouteTarget] = {}
        self._retired: OrderedDict[int, RouteTarget] = OrderedDict()

    def publish(self, hub, service) -> None:
        """Gives the lane (`hub`, an ethost.LaneHub) the routes `service` serves now."""
        entries = service.lane_routes()
        routes = {}
        for route, model, version, method, _, _, signature, *_ in entries:
            routes[route] = RouteTarget(
                model,
                version,
                method,
                [(spec.name, spec.datatype) for spec in signature.inputs],
                signature.output_names(),
            )
        for route, known in self._routes.items():
            if route not in routes:
                self._retired[route] = known
        while len(self._retired) > _RETIRED_KEPT:
            self._retired.popitem(last=False)
        self._routes = routes
        hub.publish(service.generation, service.settings.inline_execute_us * 1e3, entries)

    def message(self, payload: bytes) -> messages.Infer | None:
        """The inference message a lane request stands for; None when its route is unknown
        (stopped serving too long ago)."""
        route_id, key, generation, room, size, asked, inputs, refs = lane_frames.read_request(
            payload
        )
        route = self._routes.get(route_id) or self._retired.get(route_id)
        if route is None:
            return None
        wanted = [name for index, name in enumerate(route.outputs) if asked >> index & 1]
        # Tensors in clients' regions, as the fronts' messages name them (shm/refs.to_wire).
        in_regions = {(output, tensor): (region, byte_size, offset) for tensor, output, region,
                      offset, byte_size in refs}  # fmt: skip
        shared = None
        if refs:
            shared = tuple(
                tuple(
                    (names[tensor], *in_regions[(output, tensor)])
                    for output, tensor in in_regions
                    if output is is_output and tensor < len(names)
                )
                for is_output, names in (
                    (False, [name for name, _ in route.inputs]),
                    (True, route.outputs),
                )
            )
        return messages.Infer(
            frames.INFER,
            key,
            route.model,
            route.version,
            route.method,
            [
                (name, datatype, tuple(shape), in_regions.get((False, index), offset))
                for index, ((name, datatype), (offset, shape)) in enumerate(
                    zip(route.inputs, inputs, strict=True)
                )
            ],
            None if len(wanted) == len(route.outputs) else wanted,
            room,
            size,
            None,  # timeout: a request with one does not travel this way
            None,  # the client's request id stays with the front
            None,  # parameters: likewise
            generation,
            shared,
        )

    def output_name(self, payload: bytes, index: int) -> str:
        """The name of output `index` of the method a lane request (its route known) is for."""
        route_id = lane_frames.read_request(payload)[0]
        return (self._routes.get(route_id) or self._retired[route_id]).outputs[index]

    @staticmethod
    def request_id(payload: bytes) -> int:
        return lane_frames.read_request(payload)[1]
