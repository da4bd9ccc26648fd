"""The engine's text side: tokenizer, chat template, detokenizer, stop strings, tool-call parser.

Pure Python, no torch: the TGI adapter uses `engine.text.stop` in the gateway process.
This file imports nothing, so importing one module here costs only that module.
"""
