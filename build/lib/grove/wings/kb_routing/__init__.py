"""Knowledge-base routing (R1-Router): questions answered by routing follow-up queries to text, table and medical
knowledge bases, with step rewards (``grove[kb-routing]``; docs/kb-routing.md, docs/knowledge-bases.md)."""
