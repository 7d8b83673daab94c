{{/* Chart name, truncated to a DNS label. */}}
{{- define "prescaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name ("prescaler" -> "prescaler"). */}}
{{- define "prescaler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "prescaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prescaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "prescaler.labels" -}}
{{ include "prescaler.selectorLabels" . }}
app.kubernetes.io/part-of: prescaler
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "prescaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "prescaler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding tls.crt/tls.key. */}}
{{- define "prescaler.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "existingSecret" }}
{{- required "certificates.existingSecret is required with mode existingSecret" .Values.certificates.existingSecret }}
{{- else }}
{{- printf "%s-tls" (include "prescaler.fullname" .) }}
{{- end }}
{{- end }}

{{/* The DNS names kube-aggregator and in-cluster clients use for the Service. */}}
{{- define "prescaler.dnsNames" -}}
{{- $svc := include "prescaler.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/*
Self-signed certificates, computed once per render and shared by the Secret and the APIService
(named template results are not cached, so the dict is stored in .Values under a private key).
An existing Secret is reused so upgrades keep the CA the aggregator already trusts.
*/}}
{{- define "prescaler.selfSignedCerts" -}}
{{- if not (hasKey .Values "__prescalerCerts") }}
{{- $secretName := include "prescaler.tlsSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- $certs := dict }}
{{- if and $existing (hasKey $existing.data "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") }}
{{- $_ := set $certs "ca" (index $existing.data "ca.crt") }}
{{- $_ := set $certs "crt" (index $existing.data "tls.crt") }}
{{- $_ := set $certs "key" (index $existing.data "tls.key") }}
{{- else }}
{{- $days := int .Values.certificates.validityDays }}
{{- $ca := genCA (printf "%s-ca" (include "prescaler.fullname" .)) $days }}
{{- $dnsNames := include "prescaler.dnsNames" . | fromJsonArray }}
{{- $cert := genSignedCert (printf "%s.%s.svc" (include "prescaler.fullname" .) .Release.Namespace) nil $dnsNames $days $ca }}
{{- $_ := set $certs "ca" ($ca.Cert | b64enc) }}
{{- $_ := set $certs "crt" ($cert.Cert | b64enc) }}
{{- $_ := set $certs "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__prescalerCerts" $certs }}
{{- end }}
{{- end }}
