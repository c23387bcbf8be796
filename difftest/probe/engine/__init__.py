"""The engine tier's probe: the branch's real LLM engine on a tiny local model. Import-free."""
