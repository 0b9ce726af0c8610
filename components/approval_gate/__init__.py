"""ApprovalGate: an optional human decision between the serving check and the push."""
