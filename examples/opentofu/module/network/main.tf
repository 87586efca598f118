# The demo module of the opentofu examples: one null resource (the null
# provider comes from the stack's offline mirror), replaced when the
# greeting changes, and two outputs. scripts/examples.sh packs this
# directory; the demo policy approves the package by its digest.
terraform {
  required_providers {
    null = {
      source  = "hashicorp/null"
      version = "2.1.2"
    }
  }
}

variable "greeting" {
  type        = string
  description = "What the resource's trigger holds."
}

resource "null_resource" "greeting" {
  triggers = {
    greeting = var.greeting
  }
}

output "greeting" {
  value = var.greeting
}

output "resource_id" {
  value = null_resource.greeting.id
}
