{{/* Names: Kubernetes names are at most 63 characters. */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The full name with a suffix, the full name cut first so that the suffix
     survives the 63-character limit: call with (dict "root" $ "suffix" "redis"). */}}
{{- define "switchyard.componentName" -}}
{{- $prefix := include "switchyard.fullname" .root | trunc (int (sub 62 (len .suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $prefix .suffix | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchyard
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "gateway"). */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "switchyard.redisName" -}}
{{- include "switchyard.componentName" (dict "root" . "suffix" "redis") -}}
{{- end -}}

{{/* The Secret and key SWITCHYARD_REDIS_URL is read from (external Redis). */}}
{{- define "switchyard.redisSecretName" -}}
{{- default (include "switchyard.componentName" (dict "root" . "suffix" "redis-url")) .Values.redis.external.existingSecret -}}
{{- end -}}

{{/* "true" when the gateway takes its Redis from SWITCHYARD_REDIS_URL: the bundled Redis, or an
     external one given by URL. An external Redis Cluster or Sentinel (config.quota_store.mode
     cluster or sentinel) is described by the config itself (startup_nodes, sentinels), and a URL
     there would name one server, which the config refuses. */}}
{{- define "switchyard.redisUrlEnv" -}}
{{- $mode := (get (.Values.config.quota_store | default dict) "mode") | default "single" -}}
{{- if eq .Values.redis.mode "bundled" -}}true
{{- else if and (eq .Values.redis.mode "external") (eq $mode "single") -}}true
{{- else if and (eq .Values.redis.mode "external") (or .Values.redis.external.url .Values.redis.external.existingSecret) -}}
{{- fail (printf "config.quota_store.mode is %s: the config finds the Redis deployment (startup_nodes or sentinels); leave redis.external.url and redis.external.existingSecret empty" $mode) -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.apiKeysSecretName" -}}
{{- default (include "switchyard.componentName" (dict "root" . "suffix" "api-keys")) .Values.auth.apiKeys.existingSecret -}}
{{- end -}}

{{- define "switchyard.apiKeysEnabled" -}}
{{- if or .Values.auth.apiKeys.existingSecret .Values.auth.apiKeys.entries -}}true{{- end -}}
{{- end -}}

{{/* Where secrets are mounted in the gateway pod (directories, so rotations reach the files). */}}
{{- define "switchyard.apiKeysDir" -}}/etc/switchyard/api-keys{{- end -}}
{{- define "switchyard.jwtDir" -}}/etc/switchyard/jwt{{- end -}}
{{- define "switchyard.configDir" -}}/etc/switchyard/config{{- end -}}
{{- define "switchyard.cacheDir" -}}/var/cache/switchyard{{- end -}}

{{/* One runtime with its defaults applied, as YAML: call with (dict "root" $ "name" NAME "spec" SPEC).
     Order: runtimeCommon < runtimeDefaults.<kind> < runtimes.<name>. Adds the computed
     fields fullname, servedModel, gatewayModel, adapter and url. */}}
{{- define "switchyard.runtime" -}}
{{- $root := .root -}}
{{- $kind := required (printf "runtimes.%s.kind is required (vllm, sglang, tgi, trtllm, llamacpp or native)" .name) .spec.kind -}}
{{- $kindDefaults := index $root.Values.runtimeDefaults $kind | default dict -}}
{{- if not (hasKey $root.Values.runtimeDefaults $kind) -}}
{{- fail (printf "runtimes.%s.kind %q is not one of vllm, sglang, tgi, trtllm, llamacpp, native" .name $kind) -}}
{{- end -}}
{{- $rt := mustMergeOverwrite (deepCopy $root.Values.runtimeCommon) (deepCopy $kindDefaults) (deepCopy .spec) -}}
{{- $model := required (printf "runtimes.%s.model is required" .name) $rt.model -}}
{{- $served := $rt.servedModel -}}
{{- if not $served -}}
{{- if eq $kind "trtllm" -}}
{{- $served = ternary (base $model) $model (hasPrefix "/" $model) -}}
{{- else -}}
{{- $served = .name -}}
{{- end -}}
{{- end -}}
{{- $fullname := include "switchyard.componentName" (dict "root" $root "suffix" (printf "rt-%s" .name)) -}}
{{- $adapter := ternary "openai" $kind (eq $kind "native") -}}
{{- $url := printf "http://%s:%d" $fullname (int $rt.port) -}}
{{- if eq $kind "native" -}}
{{- $url = printf "%s/v1" $url -}}
{{- end -}}
{{- $_ := set $rt "name" .name -}}
{{- $_ := set $rt "fullname" $fullname -}}
{{- $_ := set $rt "servedModel" $served -}}
{{- $_ := set $rt "gatewayModel" (default $served $rt.gatewayModel) -}}
{{- $_ := set $rt "adapter" $adapter -}}
{{- $_ := set $rt "url" $url -}}
{{- toYaml $rt -}}
{{- end -}}

{{/* The gateway backend entry of one runtime (a merged runtime dict as input). */}}
{{- define "switchyard.runtimeBackend" -}}
{{- $options := deepCopy (.backendOptions | default dict) -}}
{{- if and (has .kind (list "vllm" "sglang" "trtllm")) (not .toolCallParser) -}}
{{- $_ := set $options "tools" false -}}
{{- end -}}
{{- $backend := dict "name" .name "adapter" .adapter "url" .url -}}
{{- if ne .kind "tgi" -}}
{{- $_ := set $backend "served_model" .servedModel -}}
{{- end -}}
{{- if $options -}}
{{- $_ := set $backend "options" $options -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $backend (deepCopy (.backend | default dict))) -}}
{{- end -}}

{{/* The gateway config the ConfigMap holds: values.config plus what the chart owns. */}}
{{- define "switchyard.gatewayConfig" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $cfg "listen" (dict "host" "0.0.0.0" "port" (int .Values.containerPort)) -}}
{{- /* The operational views (/metrics, /readyz's detail, /admin/*) on their own listener
       (ops.port): probes and the ServiceMonitor use it, and neither the public Service
       nor a route reaches it. */ -}}
{{- $ops := deepCopy (get $cfg "ops" | default dict) -}}
{{- $_ := set $ops "listen" (dict "host" "0.0.0.0" "port" (int .Values.ops.port)) -}}
{{- $_ := unset $ops "public" -}}
{{- $_ := set $cfg "ops" $ops -}}
{{- $auth := deepCopy (get $cfg "auth" | default dict) -}}
{{- if include "switchyard.apiKeysEnabled" . -}}
{{- $_ := set $auth "api_keys_file" (printf "%s/%s" (include "switchyard.apiKeysDir" .) .Values.auth.apiKeys.secretKey) -}}
{{- end -}}
{{- if and .Values.auth.jwt.existingSecret (get $auth "jwt") -}}
{{- $jwt := get $auth "jwt" -}}
{{- if not (or (get $jwt "jwks_file") (get $jwt "jwks_url")) -}}
{{- $_ := set $jwt "jwks_file" (printf "%s/%s" (include "switchyard.jwtDir" .) .Values.auth.jwt.jwksKey) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "auth" $auth -}}
{{- if ne .Values.redis.mode "none" -}}
{{- $store := deepCopy (get $cfg "quota_store" | default dict) -}}
{{- $_ := set $store "kind" "redis" -}}
{{- $_ := set $cfg "quota_store" $store -}}
{{- end -}}
{{- $models := deepCopy (get $cfg "models" | default dict) -}}
{{- range $name, $spec := .Values.runtimes -}}
{{- if $spec.enabled -}}
{{- $rt := include "switchyard.runtime" (dict "root" $ "name" $name "spec" $spec) | fromYaml -}}
{{- $entry := get $models $rt.gatewayModel | default dict -}}
{{- $backends := get $entry "backends" | default list -}}
{{- $backend := include "switchyard.runtimeBackend" $rt | fromYaml -}}
{{- $_ := set $entry "backends" (mustAppend $backends $backend) -}}
{{- $_ := set $models $rt.gatewayModel $entry -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "models" $models -}}
{{- /* A stopping pod lets its longest stream finish unless config.drain says otherwise. */ -}}
{{- $drain := deepCopy (get $cfg "drain" | default dict) -}}
{{- if not (hasKey $drain "timeout_s") -}}
{{- $longest := 0.0 -}}
{{- range $model := $models -}}
{{- range $backend := $model.backends -}}
{{- $longest = max $longest (float64 (default 600 $backend.timeout_s)) | float64 -}}
{{- end -}}
{{- end -}}
{{- $_ := set $drain "timeout_s" $longest -}}
{{- end -}}
{{- $_ := set $cfg "drain" $drain -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The settings the gateway fixes at start (gateway/lifecycle/reload.py RESTART_ONLY): with
     reload.live, an edit to these still rolls the pods. */}}
{{- define "switchyard.restartOnlyConfig" -}}
{{- $cfg := include "switchyard.gatewayConfig" . | fromYaml -}}
{{- $limits := pick (get $cfg "limits" | default dict) "max_head_bytes" "max_headers" "head_timeout_s" "keepalive_timeout_s" "max_pipelined" -}}
{{- toYaml (merge (pick $cfg "listen" "ops" "workers" "quota_store" "log_level") (dict "limits" $limits)) -}}
{{- end -}}

{{/* Label matchers the alert rules select this release's gateway with. */}}
{{- define "switchyard.alertSelector" -}}
{{- default (printf "namespace=%q, job=%q" .Release.Namespace (include "switchyard.fullname" .)) .Values.prometheusRule.selector -}}
{{- end -}}
