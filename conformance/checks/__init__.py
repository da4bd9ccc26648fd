"""The conformance checks, one module per area of the OpenAI checklist
(`reference/OPENAI_CONFORMANCE.md` C.5); `conformance.catalog` lists them."""
