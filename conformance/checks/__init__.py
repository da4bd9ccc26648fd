"""The conformance checks, one module per area of the OpenAI checklist
(docs/openai-checklist.md §5, whose item numbers the modules cite);
`conformance.catalog` lists them."""
