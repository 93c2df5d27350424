{{/* Names ----------------------------------------------------------------------- */}}
{{- define "magnetar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "magnetar.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "magnetar.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.operator.fullname" -}}
{{- printf "%s-operator" (include "magnetar.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "magnetar.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.cluster.name" -}}
{{- default .Release.Name .Values.cluster.name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels ---------------------------------------------------------------------- */}}
{{- define "magnetar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: magnetar
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "magnetar.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magnetar.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "magnetar.operator.labels" -}}
{{ include "magnetar.labels" . }}
{{ include "magnetar.operator.selectorLabels" . }}
{{- end -}}

{{/* Images: repository names as `make images` builds them (magnetar/<name>), under
     global.imageRegistry when it is set ------------------------------------------- */}}
{{- define "magnetar.imageRegistry" -}}
{{- (default dict .Values.global).imageRegistry | default "" | trimSuffix "/" -}}
{{- end -}}

{{- define "magnetar.repository" -}}
{{- $registry := include "magnetar.imageRegistry" .root -}}
{{- if $registry -}}
{{- printf "%s/%s" $registry .repository -}}
{{- else -}}
{{- .repository -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.operator.image" -}}
{{- $img := .Values.operator.image -}}
{{- $repo := include "magnetar.repository" (dict "root" . "repository" $img.repository) -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.minio.image" -}}
{{- $repo := include "magnetar.repository" (dict "root" . "repository" .Values.minio.image.repository) -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.minio.image.tag) -}}
{{- end -}}

{{/* RBAC: what the operator needs inside each namespace it manages ------------------ */}}
{{- define "magnetar.operator.namespacedRules" -}}
- apiGroups: [magnetar.dev]
  resources: [pulsarclusters, tenants, topics]
  verbs: [get, list, watch, patch, update]
- apiGroups: [magnetar.dev]
  resources: [pulsarclusters/status, tenants/status, topics/status]
  verbs: [get, patch, update]
- apiGroups: [compute.functionmesh.io]
  resources: [functions]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [compute.functionmesh.io]
  resources: [functions/status]
  verbs: [get, patch, update]
- apiGroups: [apps]
  resources: [statefulsets, deployments]
  verbs: [get, list, watch, create, patch, update]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, create, patch, update, delete]
- apiGroups: [""]
  resources: [services, configmaps, serviceaccounts]
  verbs: [get, create, patch, update]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch, update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, delete, deletecollection]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, update]
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, create, patch, update]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, update]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors, podmonitors]
  verbs: [get, create, patch, update]
{{- end -}}

{{/* Validation: combinations values.schema.json cannot express ------------------ */}}
{{- define "magnetar.validate" -}}
{{- if ne (int .Values.operator.replicas) 1 -}}
{{- fail (printf "operator.replicas must be 1 (got %v): the operator runs kopf in standalone mode, without peering, so two replicas would reconcile the same objects twice" .Values.operator.replicas) -}}
{{- end -}}
{{- range .Values.operator.watchNamespaces -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) -}}
{{- fail (printf "operator.watchNamespaces: %q is not a valid namespace name (globs are not supported; leave the list empty to watch all namespaces)" .) -}}
{{- end -}}
{{- end -}}
{{- if .Values.cluster.enabled -}}
{{- $bk := default dict .Values.cluster.spec.bookies -}}
{{- $replicas := int (default 3 $bk.replicas) -}}
{{- $e := int (default 2 $bk.ensembleSize) -}}
{{- $wq := int (default 2 $bk.writeQuorum) -}}
{{- $aq := int (default 2 $bk.ackQuorum) -}}
{{- if not (and (le $aq $wq) (le $wq $e)) -}}
{{- fail (printf "cluster.spec.bookies: ackQuorum (%d) <= writeQuorum (%d) <= ensembleSize (%d) is required" $aq $wq $e) -}}
{{- end -}}
{{- if gt $e $replicas -}}
{{- fail (printf "cluster.spec.bookies: ensembleSize (%d) must not exceed replicas (%d)" $e $replicas) -}}
{{- end -}}
{{- $off := default dict .Values.cluster.spec.offload -}}
{{- if and $off.enabled (not (include "magnetar.cluster.offloadToMinio" .)) (not (and $off.bucket $off.credentialsSecret)) -}}
{{- fail "cluster.spec.offload: bucket and credentialsSecret are required when offload is enabled" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* MinIO (optional S3 server for offload on kind/minikube) ------------------------- */}}
{{- define "magnetar.minio.fullname" -}}
{{- printf "%s-minio" (include "magnetar.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.minio.secretName" -}}
{{- default (include "magnetar.minio.fullname" .) .Values.minio.existingSecret -}}
{{- end -}}

{{- define "magnetar.minio.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magnetar.name" . }}-minio
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: minio
{{- end -}}

{{- define "magnetar.minio.labels" -}}
{{ include "magnetar.labels" . }}
{{ include "magnetar.minio.selectorLabels" . }}
{{- end -}}

{{- /* "true" when the chart's PulsarCluster offloads to the chart's MinIO: minio.enabled and
       cluster.spec.offload names no target of its own (endpoint, bucket, credentialsSecret)
       and does not set enabled: false. Empty otherwise. */}}
{{- define "magnetar.cluster.offloadToMinio" -}}
{{- $off := default dict .Values.cluster.spec.offload -}}
{{- $named := or (hasKey $off "endpoint") (hasKey $off "bucket") (hasKey $off "credentialsSecret") -}}
{{- $turnedOff := and (hasKey $off "enabled") (not $off.enabled) -}}
{{- if and .Values.cluster.enabled .Values.minio.enabled (not $named) (not $turnedOff) -}}
true
{{- end -}}
{{- end -}}

{{- define "magnetar.minio.endpoint" -}}
{{- printf "http://%s.%s.svc:9000" (include "magnetar.minio.fullname" .) .Release.Namespace -}}
{{- end -}}
