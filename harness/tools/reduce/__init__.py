"""The smallest plain-torch script that still shows a bug: the command (command), the interestingness
test a candidate must pass (check), and the rewrites that shorten it: the harness's shapes inlined
(inline) and materialised (materialise), names put in place (names), tensors made plain (tensors), and
the generic rewrites and their driver (passes)."""
