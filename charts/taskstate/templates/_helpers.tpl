{{/* Names and labels */}}
{{- define "taskstate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "taskstate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "taskstate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taskstate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "taskstate.labels" -}}
{{ include "taskstate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "taskstate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "taskstate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "taskstate.socket" -}}
{{- printf "%s/%s" .Values.sidecar.socketDir .Values.sidecar.socketName -}}
{{- end -}}

{{- define "taskstate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The sidecar container (a DaemonSet container, or a native sidecar initContainer). */}}
{{- define "taskstate.sidecarContainer" -}}
name: taskstate-sidecar
image: {{ include "taskstate.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  - sidecar
  - --listen
  - unix://{{ include "taskstate.socket" . }}
  - --socket-mode
  - "0660"
  - --socket-group
  - {{ .Values.sidecar.socketGroup | quote }}
  - --log-level
  - {{ .Values.sidecar.logLevel }}
  - --redis-deadline
  - {{ .Values.sidecar.redisDeadlineSeconds | quote }}
  - --max-message-bytes
  - {{ .Values.sidecar.maxMessageBytes | int64 | quote }}
  - --drain-seconds
  - {{ .Values.sidecar.drainSeconds | quote }}
  {{- if .Values.metrics.enabled }}
  - --metrics-port
  - {{ .Values.metrics.port | quote }}
  {{- end }}
  {{- if .Values.redis.tlsSecret }}
  - --redis-tls-ca
  - /etc/taskstate/redis-tls/ca.crt
  {{- if .Values.redis.tlsClientCert }}
  - --redis-tls-cert
  - /etc/taskstate/redis-tls/tls.crt
  - --redis-tls-key
  - /etc/taskstate/redis-tls/tls.key
  {{- end }}
  {{- end }}
  {{- range .Values.sidecar.extraArgs }}
  - {{ . | quote }}
  {{- end }}
env:
  - name: TASKSTATE_REDIS_URL
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redis.existingSecret }}
        key: {{ .Values.redis.urlKey }}
  {{- if .Values.redis.passwordKey }}
  - name: TASKSTATE_REDIS_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redis.existingSecret }}
        key: {{ .Values.redis.passwordKey }}
  {{- end }}
{{- if .Values.metrics.enabled }}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
{{- end }}
# gRPC health over the socket: ready while Redis answers, alive while the sidecar does
readinessProbe:
  exec:
    command: [taskstate, health, --sidecar, "unix://{{ include "taskstate.socket" . }}", --timeout, "{{ .Values.probes.timeoutSeconds }}"]
  periodSeconds: {{ .Values.probes.periodSeconds }}
  timeoutSeconds: {{ add .Values.probes.timeoutSeconds 2 }}
  failureThreshold: {{ .Values.probes.failureThreshold }}
livenessProbe:
  exec:
    command: [taskstate, health, --live, --sidecar, "unix://{{ include "taskstate.socket" . }}", --timeout, "{{ .Values.probes.timeoutSeconds }}"]
  periodSeconds: {{ .Values.probes.periodSeconds }}
  timeoutSeconds: {{ add .Values.probes.timeoutSeconds 2 }}
  failureThreshold: {{ .Values.probes.failureThreshold }}
startupProbe:
  exec:
    command: [taskstate, health, --live, --sidecar, "unix://{{ include "taskstate.socket" . }}", --timeout, "2"]
  periodSeconds: 2
  timeoutSeconds: 4
  failureThreshold: 30
resources:
  {{- toYaml .Values.sidecar.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: taskstate-socket
    mountPath: {{ .Values.sidecar.socketDir }}
  - name: tmp
    mountPath: /tmp
  {{- if .Values.redis.tlsSecret }}
  - name: redis-tls
    mountPath: /etc/taskstate/redis-tls
    readOnly: true
  {{- end }}
{{- end -}}

{{- define "taskstate.tlsVolume" -}}
{{- if .Values.redis.tlsSecret }}
- name: redis-tls
  secret:
    secretName: {{ .Values.redis.tlsSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}
