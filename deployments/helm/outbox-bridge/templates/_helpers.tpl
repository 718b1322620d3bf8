{{/* The objects' name: the release's, or outbox-bridge when the release is named so. */}}
{{- define "outbox-bridge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The selector labels; immutable once installed. */}}
{{- define "outbox-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outbox-bridge.labels" -}}
{{ include "outbox-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "outbox-bridge.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The container's environment beside the ConfigMap: the database URL and the NATS credentials file from their Secrets. */}}
{{- define "outbox-bridge.secretEnv" -}}
- name: BRIDGE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.secretName }}
      key: {{ .Values.database.secretKey }}
{{- if .Values.nats.credsSecretName }}
- name: BRIDGE_NATS_CREDS_FILE
  value: /etc/bridge/nats/{{ .Values.nats.credsSecretKey }}
{{- end }}
{{- if and .Values.ui.enabled .Values.ui.tokenSecretName }}
- name: BRIDGE_UI_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.ui.tokenSecretName }}
      key: {{ .Values.ui.tokenSecretKey }}
{{- end }}
{{- end -}}

{{- define "outbox-bridge.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "outbox-bridge.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "outbox-bridge.volumes" -}}
{{- if .Values.nats.credsSecretName }}
- name: nats-creds
  secret:
    secretName: {{ .Values.nats.credsSecretName }}
    items:
      - key: {{ .Values.nats.credsSecretKey }}
        path: {{ .Values.nats.credsSecretKey }}
    defaultMode: 0440
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{- define "outbox-bridge.volumeMounts" -}}
{{- if .Values.nats.credsSecretName }}
- name: nats-creds
  mountPath: /etc/bridge/nats
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}
