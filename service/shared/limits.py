"""The limits fronts and engine, Python and C++, agree on, read from their one definition
(runtime_ext/common/contract_limits.h, exported by the native modules): a request the Python
path accepts is one the native paths accept too, and every slot of an arena is aligned as the
engine's lane checks (tests/unit/test_contract_constants.py fails on a copy of any of them).
"""

from __future__ import annotations

import etrt_front

MAX_INPUTS: int = etrt_front.MAX_INPUTS  # inputs of one lane request
MAX_DIMS: int = etrt_front.MAX_DIMS  # dimensions of a tensor (ExecuTorch's limit)
MAX_OUTPUTS: int = etrt_front.MAX_OUTPUTS  # outputs a lane request may ask for (its mask)
MAX_DIM: int = etrt_front.MAX_DIM  # the largest one dimension (an int32 in ExecuTorch)
ALIGNMENT: int = etrt_front.ALIGNMENT  # every slot of an arena and tensor placed in it
