{{- define "execplane.labels" -}}
app.kubernetes.io/name: execplane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "execplane.pdbApiVersion" -}}
{{- if .Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget" -}}policy/v1{{- else -}}policy/v1beta1{{- end -}}
{{- end -}}

{{/* The environment every role shares: settings and secrets by reference. */}}
{{- define "execplane.env" -}}
- name: EXECPLANE_DATABASE_URL
  valueFrom: { secretKeyRef: { name: {{ .Values.database.existingSecret }}, key: {{ .Values.database.key }} } }
- name: EXECPLANE_KAFKA_BROKERS
  value: {{ .Values.kafka.brokers | quote }}
- name: EXECPLANE_TOPIC_PREFIX
  value: {{ .Values.kafka.topicPrefix | quote }}
{{- with .Values.kafka.replicationFactor }}
- name: EXECPLANE_TOPIC_REPLICATION_FACTOR
  value: {{ . | quote }}
{{- end }}
- name: EXECPLANE_KAFKA_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "sasl" .Values.kafka.securityProtocol }}
- name: EXECPLANE_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: EXECPLANE_KAFKA_SASL_USERNAME
  value: {{ .Values.kafka.sasl.username | quote }}
- name: EXECPLANE_KAFKA_SASL_PASSWORD_FILE
  value: /etc/execplane/kafka-sasl/{{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
- name: EXECPLANE_KAFKA_SSL_CA_FILE
  value: /etc/execplane/kafka-ca/{{ .Values.kafka.tls.caKey }}
{{- end }}
{{- range $name, $value := .Values.kafka.properties }}
- name: EXECPLANE_KAFKA_PROPERTY_{{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- if .Values.s3.endpoint }}
- name: EXECPLANE_S3_ENDPOINT
  value: {{ .Values.s3.endpoint | quote }}
- name: EXECPLANE_S3_REGION
  value: {{ .Values.s3.region | quote }}
- name: EXECPLANE_S3_BUCKET
  value: {{ .Values.s3.bucket | quote }}
- name: EXECPLANE_S3_ACCESS_KEY_ID
  valueFrom: { secretKeyRef: { name: {{ .Values.s3.existingSecret }}, key: {{ .Values.s3.accessKeyIdKey }} } }
- name: EXECPLANE_S3_SECRET_ACCESS_KEY
  valueFrom: { secretKeyRef: { name: {{ .Values.s3.existingSecret }}, key: {{ .Values.s3.secretAccessKeyKey }} } }
{{- end }}
{{- if .Values.vault.address }}
- name: EXECPLANE_VAULT_ADDR
  value: {{ .Values.vault.address | quote }}
{{- if eq .Values.vault.auth "token" }}
- name: EXECPLANE_VAULT_TOKEN
  valueFrom: { secretKeyRef: { name: {{ .Values.vault.existingSecret }}, key: {{ .Values.vault.tokenKey }} } }
{{- else }}
- name: EXECPLANE_VAULT_APPROLE_MOUNT
  value: {{ .Values.vault.approleMount | quote }}
- name: EXECPLANE_VAULT_ROLE_ID
  valueFrom: { secretKeyRef: { name: {{ .Values.vault.existingSecret }}, key: {{ .Values.vault.roleIdKey }} } }
- name: EXECPLANE_VAULT_SECRET_ID
  valueFrom: { secretKeyRef: { name: {{ .Values.vault.existingSecret }}, key: {{ .Values.vault.secretIdKey }} } }
{{- end }}
{{- end }}
- name: EXECPLANE_POLICY_FILE
  value: /etc/execplane/policy/policy.yaml
- name: EXECPLANE_METRICS_ADDR
  value: "0.0.0.0:{{ .Values.metricsPort }}"
- name: EXECPLANE_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- end -}}

{{- define "execplane.volumeMounts" -}}
- { name: policy, mountPath: /etc/execplane/policy, readOnly: true }
- { name: tmp, mountPath: /tmp }
{{- if hasPrefix "sasl" .Values.kafka.securityProtocol }}
- { name: kafka-sasl, mountPath: /etc/execplane/kafka-sasl, readOnly: true }
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
- { name: kafka-ca, mountPath: /etc/execplane/kafka-ca, readOnly: true }
{{- end }}
{{- end -}}

{{- define "execplane.volumes" -}}
- name: policy
  configMap: { name: {{ .Release.Name }}-policy }
- name: tmp
  emptyDir: {}
{{- if hasPrefix "sasl" .Values.kafka.securityProtocol }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.kafka.sasl.existingSecret }}
    items: [{ key: {{ .Values.kafka.sasl.passwordKey }}, path: {{ .Values.kafka.sasl.passwordKey }} }]
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
    items: [{ key: {{ .Values.kafka.tls.caKey }}, path: {{ .Values.kafka.tls.caKey }} }]
{{- end }}
{{- end -}}

{{- define "execplane.probes" -}}
livenessProbe:
  httpGet: { path: /healthz, port: metrics }
  periodSeconds: 10
  failureThreshold: 6
readinessProbe:
  httpGet: { path: /readyz, port: metrics }
  periodSeconds: 5
  failureThreshold: 2
startupProbe:
  httpGet: { path: /healthz, port: metrics }
  periodSeconds: 2
  failureThreshold: 30
{{- end -}}
