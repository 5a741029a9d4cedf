{{/* The Database's name: every object is named after it. */}}
{{- define "database.fullname" -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select this Database's pods. Never change them: selectors are immutable. */}}
{{- define "database.selectorLabels" -}}
app.kubernetes.io/name: database
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "database.labels" -}}
{{ include "database.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.engine | quote }}
app.kubernetes.io/managed-by: database-operator
app.kubernetes.io/part-of: database-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The role label the operator sets on pods: primary or replica. */}}
{{- define "database.roleLabel" -}}database.example.com/role{{- end -}}

{{- define "database.image" -}}
{{- if .Values.image -}}
{{ .Values.image }}
{{- else -}}
{{ index .Values.images .Values.engine }}:{{ .Values.version }}
{{- end -}}
{{- end -}}

{{- define "database.port" -}}
{{- required "port: the engine's port (5432 for postgresql, 3306 for mysql and mariadb), which the operator sets" .Values.port -}}
{{- end -}}

{{- define "database.portName" -}}
{{- required "portName: the engine's port name (postgresql or mysql), which the operator sets" .Values.portName -}}
{{- end -}}

{{- define "database.credentialsSecret" -}}
{{- .Values.credentialsSecret | default (printf "%s-credentials" (include "database.fullname" .)) -}}
{{- end -}}

{{/* The Secret of the replication account. */}}
{{- define "database.replicationSecret" -}}
{{- .Values.replicationSecret | default (printf "%s-replication" (include "database.fullname" .)) -}}
{{- end -}}

{{/* The Secret of the monitoring account (the agent's metrics), and where it is mounted. */}}
{{- define "database.monitoringSecret" -}}
{{- .Values.monitoringSecret | default (printf "%s-monitoring" (include "database.fullname" .)) -}}
{{- end -}}
{{- define "database.monitoringPath" -}}/etc/database-operator/monitoring{{- end -}}

{{/* Where the data volume is mounted. */}}
{{- define "database.dataPath" -}}
{{- if eq .Values.engine "postgresql" -}}/var/lib/postgresql/data{{- else -}}/var/lib/mysql{{- end -}}
{{- end -}}

{{/* Where PostgreSQL's configuration from the ConfigMap is mounted. */}}
{{- define "database.configPath" -}}/etc/postgresql/operator{{- end -}}

{{/* The uid and gid the official images run their server as. */}}
{{- define "database.uid" -}}999{{- end -}}

{{/* Where the start scripts are mounted. */}}
{{- define "database.scriptsPath" -}}/opt/database-operator/scripts{{- end -}}

{{/* The Secret with the server certificate, its key and the CA bundle, and where it is mounted. */}}
{{- define "database.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "database.fullname" .)) -}}
{{- end -}}
{{- define "database.tlsPath" -}}{{ .Values.tls.mountPath | default "/etc/database-operator/tls" }}{{- end -}}

{{/* PostgreSQL's log_directory: named pipes the agent relays (in the run volume, an emptyDir). */}}
{{- define "database.serverLogPath" -}}/var/run/postgresql/log{{- end -}}

{{/* Where the operator's topology ConfigMap is mounted. */}}
{{- define "database.topologyPath" -}}/etc/database-operator/topology{{- end -}}

{{/* The operator's pods as a NetworkPolicy peer: its namespace and its pods' label, never the whole namespace. */}}
{{- define "database.operatorPeer" -}}
{{- with .Values.operatorNamespace }}
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ . | quote }}
          podSelector:
            matchLabels:
              app.kubernetes.io/name: database-operator
{{- end }}
{{- end -}}
