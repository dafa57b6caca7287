{{/*
The labels of every object of the release: Kubernetes' recommended ones and Helm's chart label,
so that `kubectl get all,clusterroles -l app.kubernetes.io/instance=<release>` finds them all.
*/}}
{{- define "slipway.labels" -}}
app.kubernetes.io/name: slipway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: slipway
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image of the controller and the agent: repository:tag, or repository@digest. */}}
{{- define "slipway.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of a pod spec, if any. */}}
{{- define "slipway.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A CRD from files/crds/ (byte-identical copies of crds/, written by `just crd`), annotated to
survive `helm uninstall` when crds.keep is set.
*/}}
{{- define "slipway.crd" -}}
{{- $crd := .root.Files.Get (printf "files/crds/%s.yaml" .name) | fromYaml -}}
{{- if not $crd.spec -}}
{{- fail (printf "files/crds/%s.yaml is missing or not a CRD: %v" .name $crd.Error) -}}
{{- end -}}
{{- if .root.Values.crds.keep -}}
{{- $_ := set $crd.metadata "annotations" (dict "helm.sh/resource-policy" "keep") -}}
{{- end -}}
{{- $labels := include "slipway.labels" .root | fromYaml -}}
{{- $_ := set $crd.metadata "labels" (merge (default (dict) $crd.metadata.labels) $labels) -}}
---
{{ toYaml $crd }}
{{- end -}}
