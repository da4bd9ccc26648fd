"""Which Redis deployment a shared store uses, as the config describes it
(`quota_store` in gateway/config/schema.py): one server at `url`, a Redis Cluster found
from `startup_nodes`, or the master that Sentinel names `service_name`, found
from `sentinels`. README.md ("Tenancy and protection") and docs/operations.md
("Redis in production") show each shape; `redis_target()` turns it into the
stores/redis_connect.py `RedisTarget` the stores connect with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stores.redis_connect import RedisTarget, parse_address, tls_problem

REDIS_PORT = 6379
SENTINEL_PORT = 26379


class RedisDeploymentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["single", "cluster", "sentinel"] = "single"
    url: str = "redis://127.0.0.1:6379/0"  # single: the server (credentials and rediss:// may be in it)
    startup_nodes: list[str] = Field(default_factory=list)  # cluster: host:port of any of its nodes
    sentinels: list[str] = Field(default_factory=list)  # sentinel: host:port of each sentinel
    service_name: str | None = None  # sentinel: the name the sentinels monitor the master by
    # Credentials for the data nodes, and for the sentinels (which usually have their
    # own); passwords from files (mounted secrets), read at start.
    username: str | None = None
    password_file: str | None = None
    sentinel_username: str | None = None
    sentinel_password_file: str | None = None
    tls: bool = False  # cluster and sentinel; single takes rediss:// in its url
    tls_ca_file: str | None = None

    @model_validator(mode="after")
    def _deployment(self) -> RedisDeploymentConfig:
        problem = self.deployment_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def deployment_problem(self) -> str | None:
        """What is wrong with the deployment described (None: nothing)."""
        if self.mode == "cluster":
            if not self.startup_nodes:
                return "mode cluster needs startup_nodes: host:port of one or more of the cluster's nodes"
            if "url" in self.model_fields_set:
                return "url names one server; mode cluster finds the cluster from startup_nodes"
        elif self.mode == "sentinel":
            if not self.sentinels or not self.service_name:
                return "mode sentinel needs sentinels (host:port of each) and service_name (the master's name)"
            if "url" in self.model_fields_set:
                return "url names one server; mode sentinel asks the sentinels for the master"
        tls = tls_problem(self.mode, self.url, self.tls, self.tls_ca_file)  # the target's own rule
        if tls is not None:
            return tls
        for name, mode in (("startup_nodes", "cluster"), ("sentinels", "sentinel"), ("service_name", "sentinel")):
            if getattr(self, name) and self.mode != mode:
                return f"{name} is for mode {mode}, not {self.mode}"
        if self.mode != "sentinel" and (self.sentinel_username or self.sentinel_password_file):
            return "sentinel_username and sentinel_password_file are for mode sentinel"
        if self.mode == "single" and self.password_file and urlsplit(self.url).password is not None:
            return "the password is both in url and in password_file: keep one"
        for node in (*self.startup_nodes, *self.sentinels):
            try:
                parse_address(node, REDIS_PORT)
            except ValueError as exc:
                return str(exc)
        for name in ("password_file", "sentinel_password_file", "tls_ca_file"):
            path = getattr(self, name)
            if path is not None and not os.access(path, os.R_OK):
                return f"{name} {path} cannot be read"
        return None

    def redis_target(self) -> RedisTarget:
        """The deployment to connect to, passwords read from their files now."""
        return RedisTarget(
            mode=self.mode,
            url=self.url,
            startup_nodes=tuple(parse_address(n, REDIS_PORT) for n in self.startup_nodes),
            sentinels=tuple(parse_address(n, SENTINEL_PORT) for n in self.sentinels),
            service_name=self.service_name or "",
            username=self.username,
            password=_secret(self.password_file),
            sentinel_username=self.sentinel_username,
            sentinel_password=_secret(self.sentinel_password_file),
            tls=self.tls,
            tls_ca_file=self.tls_ca_file,
        )


def _secret(path: str | None) -> str | None:
    if path is None:
        return None
    return Path(path).read_text().strip() or None
